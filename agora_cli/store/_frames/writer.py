"""Writing a run's frames: gapless ``seq``, coalesced deltas, one short transaction per write."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._engine import translate_error
from agora_cli.store._errors import AgoraError, Conflict, InvalidInput
from agora_cli.store._frames.purge import DEFAULT_FRAME_TTL_S, purge_expired
from agora_cli.store._frames.reader import check_run_id, find_last_frame
from agora_cli.store._schema import run, stream_frame, thread
from agora_cli.store._sealing import Sealer, frame_row_id, sealer_for
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._tenant_guard import run_tenant, runs_with_threads
from agora_cli.store._tenant_session import transaction_tenant
from agora_cli.store._values import dump_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "COALESCED_FRAME_TYPES",
    "DEFAULT_FLUSH_MS",
    "FrameWriter",
]

sf = stream_frame

log = logging.getLogger(__name__)


DEFAULT_FLUSH_MS = 50


AUTO_PURGE_EVERY_MS = 60_000


COALESCED_FRAME_TYPES = frozenset({"text-delta", "reasoning-delta", "tool-input-delta"})


def _checked_frame(frame: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(frame, Mapping):
        raise InvalidInput(f"a frame must be a JSON object, not {type(frame).__name__}")
    body = dict(frame)
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidInput("a frame needs a non-empty string 'type'")
    if kind in COALESCED_FRAME_TYPES and not isinstance(body.get("delta"), str):
        raise InvalidInput(f"a {kind} frame needs a string 'delta'")
    if kind == "tool-input-delta":
        call = body.get("tool_call_id")
        if not isinstance(call, str) or not call:
            raise InvalidInput("a tool-input-delta frame needs a non-empty 'tool_call_id'")
    return body


def _run_tenants(conn: Connection, run_id: str) -> tuple[str | None, str | None]:
    """One read of a run's tenants: (the tenant its frames are sealed for — its thread's, as
    ``reader.run_tenant`` opens them; the tenant its frames are written under — its own
    tenant_ref, else its thread's). For a run without a row (or one this session does not see):
    no sealing, and the session's tenant (``agora.tenant``, PostgreSQL), else none."""
    found = conn.execute(
        select(thread.c.tenant_ref, run_tenant())
        .select_from(runs_with_threads())
        .where(exact_eq(run.c.id, run_id))
    ).first()
    if found is None:
        return None, transaction_tenant(conn)
    sealed_for, written_under = found
    if written_under is None:
        written_under = transaction_tenant(conn)
    return sealed_for, written_under


def _loggable(exc: BaseException) -> str:
    """An error as a log may show it: agora's one line, never the statement's parameters nor a
    driver's detail lines (they can quote the row: the frame's text)."""
    err = translate_error(exc)
    return type(exc).__name__ if err is None else err.message


def _dumps(body: Mapping[str, Any]) -> str:
    return dump_json("frame", body)


class _PurgeGate:
    """At most one automatic purge per interval in this process."""

    def __init__(self, every_ms: int = AUTO_PURGE_EVERY_MS) -> None:
        self.every_ms = every_ms
        self._lock = threading.Lock()
        self._last: int | None = None

    def take(self, now_ms: int) -> bool:
        with self._lock:
            if self._last is not None and now_ms - self._last < self.every_ms:
                return False
            self._last = now_ms
            return True


_AUTO_PURGE = _PurgeGate()


class FrameWriter:
    """Append one run's frames: gapless ``seq``, coalesced deltas, the end marker.

    One producer per writer (the internal lock only guards against the flush timer). Each write
    is its own committed transaction on ``engine``. ``autoflush`` starts a timer that writes a
    gathered delta ``flush_ms`` after its first part (pass ``False`` with a ``ManualClock``; then
    only the next frame, ``flush()`` or ``end()`` writes it). An error in the timer's write is
    raised by the next call. Use as a context manager to flush on exit (it does not end the run).
    """

    def __init__(
        self,
        engine: Engine,
        run_id: str,
        *,
        flush_ms: int = DEFAULT_FLUSH_MS,
        clock: Clock | None = None,
        autoflush: bool = True,
        auto_purge: bool = True,
        ttl_s: int = DEFAULT_FRAME_TTL_S,
    ) -> None:
        if flush_ms < 0 or ttl_s < 0:
            raise InvalidInput("flush_ms and ttl_s must be >= 0")
        self.engine = engine
        self.run_id = check_run_id(run_id)
        self.flush_ms = flush_ms
        self.clock: Clock = clock or SystemClock()
        self.autoflush = autoflush
        self.auto_purge = auto_purge
        self.ttl_s = ttl_s
        self._lock = threading.RLock()
        self._next_seq: int | None = None
        self._tenant: str | None = None  # the run's tenant, read with the first seq
        self._ended = False
        self._error: BaseException | None = None
        self._pending: dict[str, Any] | None = None
        self._pending_key: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._pending_since = 0
        self._generation = 0
        self._timer: threading.Timer | None = None
        # the run's tenant's sealer (``None``: plain), found once, at the first write
        self._sealer: Sealer | None = None

    def __enter__(self) -> FrameWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._cancel_timer()
            if self._ended:
                return
            if exc[0] is None:
                self.flush()
                return
            try:  # keep what the model produced, without masking the error in flight
                self.flush()
            except (AgoraError, SQLAlchemyError) as flush_exc:
                why = _loggable(flush_exc)
                log.warning("could not flush run %r on error: %s", self.run_id, why)

    @property
    def last_seq(self) -> int:
        """The highest ``seq`` this writer wrote or found (0 before its first write)."""
        return 0 if self._next_seq is None else self._next_seq - 1

    @property
    def ended(self) -> bool:
        return self._ended

    def append(self, frame: Mapping[str, Any]) -> None:
        """Append one frame; a delta may wait up to ``flush_ms`` to be joined by the next one."""
        body = _checked_frame(frame)
        with self._lock:
            self._raise_timer_error()
            if self._ended:
                raise Conflict(f"run {self.run_id!r} has ended; it takes no more frames")
            now = self.clock.now_ms()
            if body["type"] in COALESCED_FRAME_TYPES:
                key = {k: v for k, v in body.items() if k != "delta"}
                if (
                    self._pending is not None
                    and key == self._pending_key
                    and now - self._pending_since < self.flush_ms
                ):
                    self._parts.append(body["delta"])
                    return
                if self.flush_ms == 0:
                    self._write([*self._gathered(), _dumps(body)])
                    return
                self._write(self._gathered())
                self._gather(body, key, now)
                return
            self._write([*self._gathered(), _dumps(body)])

    def flush(self) -> None:
        """Write the gathered delta now, if any."""
        with self._lock:
            self._raise_timer_error()
            self._write(self._gathered())

    def end(self) -> int:
        """Write the gathered delta and the end marker; return the marker's ``seq``.

        Idempotent. Then, with ``auto_purge``, purges expired runs (at most once a minute per
        process; a failure there is logged, not raised: the run has ended).
        """
        with self._lock:
            self._raise_timer_error()
            if self._ended:
                return self.last_seq
            self._write([*self._gathered(), None])
            self._ended = True
        if self.auto_purge and self.ttl_s > 0 and _AUTO_PURGE.take(self.clock.now_ms()):
            try:
                purge_expired(self.engine, self.ttl_s, clock=self.clock)
            except (AgoraError, SQLAlchemyError) as exc:
                log.warning("automatic frame purge failed: %s", _loggable(exc))
        return self.last_seq

    # internals (called with the lock held)

    def _gather(self, body: dict[str, Any], key: dict[str, Any], now: int) -> None:
        self._pending, self._pending_key = body, key
        self._parts = [body["delta"]]
        self._pending_since = now
        if self.autoflush:
            self._generation += 1
            self._timer = threading.Timer(
                self.flush_ms / 1000, self._on_timer, args=(self._generation,)
            )
            self._timer.start()

    def _gathered(self) -> list[str | None]:
        if self._pending is None:
            return []
        return [_dumps({**self._pending, "delta": "".join(self._parts)})]

    def _seal(self, seq: int, text: str | None) -> str | None:
        if text is None or self._sealer is None:
            return text
        return self._sealer.seal(sf.name, "frame", frame_row_id(self.run_id, seq), text)

    def _cancel_timer(self) -> None:
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation or self._pending is None:
                return
            try:
                self._write(self._gathered())
            except BaseException as exc:
                self._error = exc

    def _raise_timer_error(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    def _write(self, frames: Sequence[str | None]) -> None:
        if not frames:
            return
        try:
            with self.engine.begin() as conn:
                if self._next_seq is None:
                    # A keyed tenant's payloads are sealed (``KeyUnavailable`` without the KEK:
                    # never written in plaintext); the run's tenant is read once per writer.
                    sealed_for, self._tenant = _run_tenants(conn, self.run_id)
                    self._sealer = sealer_for(conn, sealed_for)
                    last = find_last_frame(conn, self.run_id, raw=True)
                    self._next_seq = 1 if last is None else last.seq + 1
                now = self.clock.now_ms()
                conn.execute(
                    insert(sf),
                    [
                        {
                            "run_id": self.run_id,
                            "seq": self._next_seq + i,
                            "frame": self._seal(self._next_seq + i, text),
                            "created_at": now,
                            "tenant_ref": self._tenant,
                        }
                        for i, text in enumerate(frames)
                    ],
                )
        except IntegrityError as exc:
            self._next_seq = None  # another writer got there: re-read the highest seq next time
            raise Conflict(
                f"another writer is appending to run {self.run_id!r} (duplicate seq); "
                "a run takes one writer at a time"
            ) from exc
        self._next_seq += len(frames)
        self._pending = self._pending_key = None
        self._parts = []
        self._cancel_timer()
