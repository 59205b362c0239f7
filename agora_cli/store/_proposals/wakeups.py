"""Waking a worker when work becomes claimable: PostgreSQL's NOTIFY, else adaptive polling.

Every write that makes a proposal claimable (an approval in ``decide_proposal``, which
``decide_as_operator`` shares, and ``requeue_proposal``) calls ``notify_work(conn)``: on
PostgreSQL that is ``pg_notify('agora_work', '')`` in the writer's own transaction, so it is
delivered on commit only (a rolled-back decision wakes nobody) and a transaction that approves
many proposals sends one notification (PostgreSQL folds equal ones). The payload is empty: the
channel is database-wide, visible to every role that can LISTEN, so it carries no tenant, tool
or id. NOTIFY goes through a transaction pooler like any statement; LISTEN does not (the next
transaction runs on another server connection), so a listener needs a direct connection.

A work whose lease runs out becomes claimable by the clock alone, with no write to notify
from: a waiting worker finds it at its next poll (``claim_next`` recovers it).

``WorkWaiter`` is the worker's side. On PostgreSQL it LISTENs on a dedicated autocommit
connection (the listen URL, else the engine's own server when no pooler stands in between) and
``wait_for_work`` returns as soon as a notification arrives, else after the poll interval. A
notification never replaces the claim: the worker claims after every wait, woken or not, so a
notification it missed costs at most one poll interval. Behind a pooler without a listen URL,
and on MariaDB/MySQL and SQLite, it polls adaptively: ``min_interval`` right after work was
found, doubling on each idle wait up to ``poll_interval``.
"""

from __future__ import annotations

import logging
import select
import time
from typing import TYPE_CHECKING, Any, Literal

from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput

if TYPE_CHECKING:
    from types import TracebackType

    from sqlalchemy.engine import Connection, Engine

__all__ = ["WORK_CHANNEL", "WaitMode", "WorkWaiter", "notify_work"]

WORK_CHANNEL = "agora_work"
MIN_INTERVAL_S = 0.01  # adaptive polling's first wait after work was found
DEFAULT_POLL_S = 5.0
MAX_POLL_S = 3600.0  # an hour: a bound for every wait (and no infinite or NaN interval)
WaitMode = Literal["listening", "polling"]

log = logging.getLogger("agora.wakeups")


def notify_work(conn: Connection) -> None:
    """Tell waiting workers that work may be claimable, when ``conn``'s transaction commits.

    PostgreSQL only (a no-op elsewhere, where workers poll). Call it in the transaction of the
    write that made the work claimable.
    """
    if dialect_of(conn).listens:
        conn.exec_driver_sql(f"SELECT pg_notify('{WORK_CHANNEL}', '')")


class WorkWaiter:
    """Block a worker until work may be claimable: woken by a notification, else by polling.

    Use it between claims: claim, and when nothing was due, ``wait_for_work()``; when a claim
    found work, ``work_found()`` (adaptive polling starts again from ``min_interval``)::

        with WorkWaiter(engine, poll_interval=5, listen_url=listen_url) as waiter:
            while True:
                claim = store.claim_next(worker_id, lease_ms)
                if claim.work is None:
                    waiter.wait_for_work()
                    continue
                waiter.work_found()
                ...

    ``listen_url`` is a direct PostgreSQL URL to LISTEN on when ``engine`` goes through a
    transaction pooler (PgBouncer), which cannot carry LISTEN. Without it, an engine that
    reaches PostgreSQL through a pooler polls, and says so once (``notice``, logged as a
    warning on the ``agora.wakeups`` logger). A listener whose connection drops reconnects on
    the next wait, polling meanwhile; after reconnecting it wakes the worker once, since a
    notification may have been sent while it was away. ``listen=False`` polls on PostgreSQL too.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        poll_interval: float = DEFAULT_POLL_S,
        listen_url: str | None = None,
        min_interval: float = MIN_INTERVAL_S,
        listen: bool = True,
    ) -> None:
        if not 0 < min_interval <= poll_interval <= MAX_POLL_S:
            raise InvalidInput(
                f"poll_interval must be at least min_interval, both above 0 and at most "
                f"{MAX_POLL_S:g} s"
            )
        self.poll_interval = float(poll_interval)
        self.min_interval = float(min_interval)
        self.delay = self.min_interval  # the next polling wait
        self.notice: str | None = None  # why a PostgreSQL worker polls instead of listening
        self._listen_engine: Engine | None = None
        self._conn: Any = None  # the listener's psycopg connection, while connected
        self._owned: Engine | None = None  # the listen URL's engine, disposed on close()
        self.mode: WaitMode = self._choose(engine, listen_url) if listen else "polling"
        if self.mode == "listening":
            try:
                self._connect()
            except Exception as exc:  # agora's error (DatabaseUnreachable ...), not the driver's
                self.close()
                from agora_cli.store._engine import translate_error  # lazy: a failure only

                translated = translate_error(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _choose(self, engine: Engine, listen_url: str | None) -> WaitMode:
        if listen_url is not None:
            # lazy: the engine module is already loaded with the caller's engine
            from agora_cli.store._engine import open_engine

            listen = open_engine(listen_url)
            if not dialect_of(listen).listens:
                listen.dispose()
                raise InvalidInput("the listen URL must be a PostgreSQL URL (LISTEN/NOTIFY)")
            self._listen_engine = self._owned = listen
            return "listening"
        if not dialect_of(engine).listens:
            return "polling"
        from agora_cli.store._pooler import through_pooler  # lazy: PostgreSQL only

        if through_pooler(engine):
            self.notice = (
                "the database URL goes through a connection pooler, and a transaction pooler "
                f"cannot carry LISTEN: polling every {self.min_interval:g}-{self.poll_interval:g} "
                "s (adaptive); give a direct listen URL (--listen-db) to wake on a decision at once"
            )
            log.warning("%s", self.notice)
            return "polling"
        self._listen_engine = engine
        return "listening"

    # --- the listener ---------------------------------------------------------------------

    def _connect(self) -> None:
        """A dedicated autocommit connection, out of the engine's pool, listening."""
        assert self._listen_engine is not None
        fairy = self._listen_engine.raw_connection()
        conn = fairy.driver_connection
        assert conn is not None
        fairy.detach()  # never back to the pool: it belongs to this waiter until close()
        conn.rollback()  # a checkout hook may have opened a transaction
        conn.autocommit = True
        conn.execute(f"LISTEN {WORK_CHANNEL}")
        self._conn = conn

    def _reconnect(self) -> bool:
        # lazy: psycopg is loaded with a PostgreSQL engine already
        from sqlalchemy.exc import SQLAlchemyError

        try:
            self._connect()
        except (SQLAlchemyError, OSError) as exc:
            log.warning("work listener: cannot reconnect yet (%s)", type(exc).__name__)
            return False
        log.warning("work listener: reconnected")
        return True

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection: nothing left to save
                log.debug("work listener: close failed", exc_info=True)

    def _wait_listening(self, limit: float) -> bool:
        import psycopg  # lazy: PostgreSQL only

        if self._conn is None:
            if self._listen_engine is not None and self._reconnect():
                self.delay = self.min_interval
                return True  # a notification may have been sent while it was away
            return self._sleep(limit)
        try:
            return self._notified(self._conn, limit)
        except psycopg.OperationalError:
            log.warning("work listener: connection lost, reconnecting")
            self._drop()
            # Back at once: wake the worker (it may have missed a notification). Not yet: the
            # worker polls, and the next wait tries again.
            return self._reconnect()

    @staticmethod
    def _notified(conn: Any, limit: float) -> bool:
        """Whether a notification arrives within ``limit`` seconds; a burst is taken whole.

        The wait is ``select`` on the socket, not psycopg's ``notifies(timeout=)``, which wakes
        every 0.1 s (to let Ctrl-C in): 100 wake-ups in 10 idle seconds, about 10 ms of CPU
        measured; ``select`` sleeps until the socket stirs. ``notifies(timeout=0)`` then reads
        what came (also what a previous read left buffered). Anything else on the socket (a
        server notice) is read and the wait goes on.
        """
        deadline = time.monotonic() + limit
        while True:
            if any(True for _ in conn.notifies(timeout=0)):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([conn.fileno()], [], [], remaining)

    # --- the public face ------------------------------------------------------------------

    def _sleep(self, limit: float) -> bool:
        time.sleep(min(self.delay, limit))
        self.delay = min(self.delay * 2, self.poll_interval)
        return False

    def wait_for_work(self, timeout: float | None = None) -> bool:
        """Block until work may be claimable: when listening, until a notification or the poll
        interval; when polling, the adaptive delay. Never longer than ``timeout`` seconds.

        ``True``: a notification said so (claim now); ``False``: the wait ran out (claim anyway:
        that is the poll). A polling wait doubles the next one, up to ``poll_interval``.
        """
        limit = self.poll_interval if timeout is None else min(self.poll_interval, timeout)
        limit = max(0.0, limit)
        if self.mode == "listening":
            return self._wait_listening(limit)
        return self._sleep(limit)

    def work_found(self) -> None:
        """Say a claim found work: the next polling wait is ``min_interval`` again."""
        self.delay = self.min_interval

    def close(self) -> None:
        """Close the listener's connection (and the listen URL's engine)."""
        self._drop()
        if self._owned is not None:
            self._owned.dispose()
            self._owned = None
        self._listen_engine = None

    def __enter__(self) -> WorkWaiter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
