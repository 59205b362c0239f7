"""`agora metrics`: agora's figures for Prometheus — printed once, or served over HTTP.

The store reads the figures (``store/_metrics.py``: values, no exposition); this module turns a
snapshot of them into metric families with prometheus-client and prints them (OpenMetrics, or
the Prometheus text format for node-exporter's textfile collector) or serves them. Every label
value is bounded here: control characters escaped as ``safe_text`` shows them, at most
``LABEL_CHARS`` characters, and each family at most ``SERIES_CAP`` series per fixed label
combination — the largest, then one ``other`` series summing the rest (budgets: the most used,
and every budget still counted in ``agora_budgets``). prometheus-client escapes what is left
(backslash, quote, newline).

``agora metrics serve`` reads the figures on a schedule in a background thread and answers each
scrape with the families built from the last collection: a scrape never queries the database,
and a failing database shows as ``agora_metrics_up 0`` and a stale
``agora_metrics_last_success_timestamp_seconds``, not as a dead endpoint.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import enum
import ipaddress
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli import __version__
from agora_cli.cli.errors import error_line
from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import emit_json, safe_text, say
from agora_cli.store._clock import iso_ms, parse_duration
from agora_cli.store._errors import InvalidInput
from agora_cli.store._masking import scrub

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from sqlalchemy.engine import Engine

    from agora_cli.store._metrics import MetricsSnapshot

__all__ = ["LABEL_CHARS", "SERIES_CAP", "app", "families"]

# A label value longer than this is cut (its last character becomes "…").
LABEL_CHARS = 128
# Series per family and fixed-label combination: the largest, then one "other" series.
SERIES_CAP = 100
OTHER = "other"
MIN_INTERVAL_MS = 5_000
MAX_INTERVAL_MS = 3_600_000

app = typer.Typer(invoke_without_command=True)


class Format(enum.StrEnum):
    openmetrics = "openmetrics"
    prometheus = "prometheus"


FramesTtlOpt = Annotated[
    int,
    typer.Option(
        "--frames-ttl",
        min=1,
        max=1_000_000_000,
        metavar="SECONDS",
        help="Count frames as awaiting purge as `frames purge --ttl` would (at least 1).",
    ),
]


# --- labels -------------------------------------------------------------------------------------


def label_value(value: str | None) -> str:
    """A label value as exported: ``""`` for none, control characters escaped, at most
    ``LABEL_CHARS`` characters."""
    if value is None:
        return ""
    shown = safe_text(value)
    return shown if len(shown) <= LABEL_CHARS else shown[: LABEL_CHARS - 1] + "…"


Values = tuple[float | None, ...]


def _plus(a: Values, b: Values) -> Values:
    """Add two rows' values; ``None`` (unknown) only where both are."""
    return tuple(
        None if x is None and y is None else (x or 0.0) + (y or 0.0)
        for x, y in zip(a, b, strict=True)
    )


def bounded(
    rows: Iterable[tuple[Sequence[str | None], Values]],
    *,
    fixed: int,
    rank: Callable[[Values], Any],
) -> list[tuple[tuple[str, ...], Values]]:
    """Rows of additive values with their labels bounded: each label value exported as
    ``label_value`` (rows whose labels then coincide are added up), and within each combination
    of the first ``fixed`` labels the ``SERIES_CAP`` rows first by ``rank``, then the rest added
    into one row whose other labels are ``other``."""
    merged: dict[tuple[str, ...], Values] = {}
    for labels, values in rows:
        key = tuple(label_value(v) for v in labels)
        merged[key] = _plus(merged[key], values) if key in merged else values
    by_fixed: dict[tuple[str, ...], list[tuple[tuple[str, ...], Values]]] = {}
    for key, values in merged.items():
        by_fixed.setdefault(key[:fixed], []).append((key, values))
    out: list[tuple[tuple[str, ...], Values]] = []
    for head, members in by_fixed.items():
        members.sort(key=lambda kv: (rank(kv[1]), kv[0]))
        kept = dict(members[:SERIES_CAP])
        rest = members[SERIES_CAP:]
        if rest:
            other = (*head, *([OTHER] * (len(rest[0][0]) - fixed)))
            total = rest[0][1]
            for _, values in rest[1:]:
                total = _plus(total, values)
            kept[other] = _plus(kept[other], total) if other in kept else total
        out.extend(kept.items())
    return out


def _by_count(values: Values) -> Any:
    return -(values[0] or 0)


# --- families -----------------------------------------------------------------------------------


@dataclass
class History:
    """What the exporter remembers across collections (``serve``; one for ``agora metrics``)."""

    collections: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_success_ms: int | None = None

    def record(self, snapshot: MetricsSnapshot) -> None:
        from agora_cli.store._metrics import GROUPS

        self.collections += 1
        for group in GROUPS:
            self.errors[group] = self.errors.get(group, 0) + (group in snapshot.errors)
        if snapshot.ok:
            self.last_success_ms = snapshot.at_ms


def _seconds(ms: int | None) -> float:
    return 0.0 if ms is None else ms / 1000


def families(snapshot: MetricsSnapshot, history: History) -> list[Metric]:
    """The metric families of a snapshot (a failed group's families are left out)."""
    # lazy: prometheus-client loads for `agora metrics` only, never for `agora --help`
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        InfoMetricFamily,
    )

    from agora_cli.store._metrics import GROUPS

    out: list[Metric] = []

    def gauge(
        name: str,
        doc: str,
        value: float | None = None,
        *,
        labels: Sequence[str] = (),
        unit: str = "",
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, value=value, labels=labels or None, unit=unit)
        out.append(family)
        return family

    info = InfoMetricFamily("agora_build", "The agora that exports these figures.")
    info.add_metric([], {"version": __version__})
    out.append(info)
    gauge(
        "agora_metrics_up",
        "1 when every group of the last collection was read.",
        float(snapshot.ok),
    )
    up = gauge(
        "agora_metrics_group_up",
        "1 when the group was read in the last collection.",
        labels=["group"],
    )
    took = gauge(
        "agora_metrics_group_duration_seconds",
        "Time the group's reads took in the last collection.",
        labels=["group"],
        unit="seconds",
    )
    errors = CounterMetricFamily(
        "agora_metrics_errors", "Collections in which the group failed.", labels=["group"]
    )
    for group in GROUPS:
        up.add_metric([group], float(group not in snapshot.errors))
        took.add_metric([group], snapshot.group_seconds.get(group, 0.0))
        errors.add_metric([group], float(history.errors.get(group, 0)))
    out.append(errors)
    out.append(
        CounterMetricFamily(
            "agora_metrics_collections", "Collections since the exporter started.",
            value=float(history.collections),
        )
    )  # fmt: skip
    gauge(
        "agora_metrics_collect_duration_seconds",
        "Time the last collection took (every group's reads).",
        snapshot.seconds,
        unit="seconds",
    )
    gauge(
        "agora_metrics_last_collect_timestamp_seconds",
        "When the last collection read the figures (Unix time).",
        _seconds(snapshot.at_ms),
        unit="seconds",
    )
    gauge(
        "agora_metrics_last_success_timestamp_seconds",
        "When a collection last read every group (Unix time; 0: never).",
        _seconds(history.last_success_ms),
        unit="seconds",
    )
    now_s = _seconds(snapshot.at_ms)

    if snapshot.schema is not None:
        s = snapshot.schema
        gauge(
            "agora_schema_current", "1 when `agora db check` finds no difference.", float(s.current)
        )
        gauge("agora_schema_problems", "Differences `agora db check` finds.", float(s.problems))
        schema = InfoMetricFamily(
            "agora_schema",
            "The main chain's applied revision ('' if migrations never ran) and head.",
        )
        schema.add_metric([], {"revision": s.revision or "", "head": s.head})
        out.append(schema)

    if snapshot.inbox is not None:
        inbox = snapshot.inbox
        pending = gauge(
            "agora_proposals_pending",
            "Waiting for a decision, not past expiry: proposals and the runtime's tool calls.",
            labels=["kind", "tool", "tenant"],
        )
        waiting = [((c.kind, c.tool_name, c.tenant_ref), (float(c.count),)) for c in inbox.pending]
        for labels, values in bounded(waiting, fixed=1, rank=_by_count):
            pending.add_metric(labels, values[0] or 0.0)
        oldest = inbox.oldest_pending_at
        gauge(
            "agora_proposals_oldest_pending_age_seconds",
            "How long the oldest item waiting for a decision has waited (0: none waits).",
            0.0 if oldest is None else max(0.0, now_s - oldest / 1000),
            unit="seconds",
        )
        gauge(
            "agora_proposals_expiring_within_hour",
            "Pending proposals that expire within the next hour.",
            float(inbox.expiring_within_hour),
        )
        gauge(
            "agora_proposals_past_expiry",
            "Pending proposals past their expiry (`agora proposals expire` marks them).",
            float(inbox.past_expiry),
        )

    if snapshot.executions is not None:
        ex = snapshot.executions
        state = gauge(
            "agora_executions",
            "Approved work by state (queued, running, stuck: its lease ran out, failed: ever).",
            labels=["state", "tool"],
        )
        work = [((c.state, c.tool_name), (float(c.count),)) for c in ex.counts]
        for labels, values in bounded(work, fixed=1, rank=_by_count):
            state.add_metric(labels, values[0] or 0.0)
        queued = ex.oldest_queued_at
        gauge(
            "agora_executions_oldest_queued_age_seconds",
            "How long the longest-queued approved work has waited for a worker (0: none).",
            0.0 if queued is None else max(0.0, now_s - queued / 1000),
            unit="seconds",
        )

    if snapshot.runs is not None:
        runs = gauge(
            "agora_runs_last_hour", "Runs started in the last hour, by status.", labels=["status"]
        )
        started = [((c.status,), (float(c.count),)) for c in snapshot.runs]
        for labels, values in bounded(started, fixed=0, rank=_by_count):
            runs.add_metric(labels, values[0] or 0.0)

    if snapshot.spend is not None:
        _spend_families(snapshot, gauge)

    if snapshot.budgets is not None:
        _budget_families(snapshot, gauge)

    if snapshot.fold is not None:
        fold = snapshot.fold
        gauge(
            "agora_fold_unfolded",
            "Closed UTC days since the ledger's first that the daily fold has not folded.",
            float(fold.unfolded_days),
        )
        gauge(
            "agora_fold_dirty",
            "Folded UTC days marked dirty: read raw until `agora spend fold` refolds them.",
            float(fold.dirty_days),
        )
        if fold.last_folded_at is not None:
            gauge(
                "agora_fold_last_folded_timestamp_seconds",
                "When a day was last folded (Unix time).",
                _seconds(fold.last_folded_at),
                unit="seconds",
            )

    if snapshot.frames is not None:
        gauge(
            "agora_frames_awaiting_purge_runs",
            "Stream runs idle past the TTL: what `agora frames purge` would delete.",
            float(snapshot.frames.runs),
        )
        gauge(
            "agora_frames_awaiting_purge_rows",
            "The frame rows of those runs.",
            float(snapshot.frames.rows),
        )
    return out


def _spend_families(snapshot: MetricsSnapshot, gauge: Callable[..., Any]) -> None:
    spend = snapshot.spend
    assert spend is not None
    labels = ["period", "model", "tenant"]
    usd = gauge(
        "agora_spend_usd",
        "Known cost (UTC today: period=day; this month: period=month); absent where every "
        "turn was unpriced.",
        labels=labels,
        unit="usd",
    )
    turns = gauge("agora_spend_turns", "Ledger turns.", labels=labels)
    unpriced = gauge(
        "agora_spend_unpriced_turns", "Turns of unknown cost (never counted as $0).", labels=labels
    )
    tokens = gauge(
        "agora_spend_tokens", "Tokens by direction.", labels=[*labels, "direction"], unit="tokens"
    )
    rows = [
        (
            (period, c.model_id, c.tenant_ref),
            (
                c.cost_usd,
                float(c.turns),
                float(c.unpriced_turns),
                float(c.input_tokens),
                float(c.output_tokens),
            ),
        )
        for period, cells in (("day", spend.day), ("month", spend.month))
        for c in cells
    ]

    def rank(v: Values) -> Any:  # cost first (unknown after every known cost), then turns
        return (v[0] is None, -(v[0] or 0.0), -(v[1] or 0.0))

    for key, (cost, n, unknown, into, out_) in bounded(rows, fixed=1, rank=rank):
        if cost is not None:
            usd.add_metric(list(key), cost)
        turns.add_metric(list(key), n or 0.0)
        unpriced.add_metric(list(key), unknown or 0.0)
        tokens.add_metric([*key, "input"], into or 0.0)
        tokens.add_metric([*key, "output"], out_ or 0.0)
    if spend.earlier_days:
        gauge(
            "agora_spend_fold_coverage_ratio",
            "Share of this month's days before today read from the daily fold (the rest, and "
            "today, from the ledger).",
            spend.folded_days / spend.earlier_days,
            unit="ratio",
        )


def _budget_families(snapshot: MetricsSnapshot, gauge: Callable[..., Any]) -> None:
    statuses = snapshot.budgets
    assert statuses is not None
    labels = ["scope", "ref", "period"]
    limit_usd = gauge(
        "agora_budget_limit_usd", "The budget's limit in USD.", labels=labels, unit="usd"
    )
    limit_tokens = gauge(
        "agora_budget_limit_tokens", "The budget's limit in tokens.", labels=labels, unit="tokens"
    )
    used_usd = gauge(
        "agora_budget_used_usd",
        "Known cost in the budget's current period.",
        labels=labels,
        unit="usd",
    )
    used_tokens = gauge(
        "agora_budget_used_tokens",
        "Tokens (input + output) in the budget's current period.",
        labels=labels,
        unit="tokens",
    )
    ratio = gauge(
        "agora_budget_used_ratio",
        "The larger used share of the budget's limits (1: reached).",
        labels=labels,
        unit="ratio",
    )
    warn = gauge(
        "agora_budget_warn_ratio",
        "The share at which the budget warns.",
        labels=labels,
        unit="ratio",
    )
    unpriced = gauge(
        "agora_budget_unpriced_turns",
        "Turns of unknown cost in the budget's period (not in used_usd).",
        labels=labels,
    )
    state = gauge(
        "agora_budget_state",
        "1 for the budget's state (ok, warning, exhausted), 0 for the others.",
        labels=[*labels, "state"],
    )
    counts = {"ok": 0, "warning": 0, "exhausted": 0}
    seen: set[tuple[str, ...]] = set()
    ranked = sorted(statuses, key=lambda s: -s.percent_used)
    for s in ranked:
        counts[s.state] += 1
        b = s.budget
        key = (b.scope_kind, label_value(b.scope_ref), b.period)
        if key in seen or len(seen) >= SERIES_CAP:
            continue  # past the cap, or a label cut to another's: counted in agora_budgets only
        seen.add(key)
        if b.limit_usd is not None:
            limit_usd.add_metric(key, b.limit_usd)
        if b.limit_tokens is not None:
            limit_tokens.add_metric(key, float(b.limit_tokens))
        used_usd.add_metric(key, s.usd)
        used_tokens.add_metric(key, float(s.tokens))
        ratio.add_metric(key, s.percent_used / 100)
        warn.add_metric(key, b.warn_at)
        unpriced.add_metric(key, float(s.unpriced_turns))
        for name in counts:
            state.add_metric([*key, name], float(name == s.state))
    total = gauge("agora_budgets", "Saved budgets by state.", labels=["state"])
    for name, n in counts.items():
        total.add_metric([name], float(n))


# --- output -------------------------------------------------------------------------------------


class _Families:
    """A prometheus-client collector that yields the families it was last given."""

    def __init__(self, found: list[Metric] | None = None) -> None:
        self.found: list[Metric] = found or []

    def collect(self) -> Iterator[Metric]:
        return iter(self.found)


def _registry(collector: _Families) -> Any:
    from prometheus_client import CollectorRegistry

    # its families change from one collection to the next: no names at registration, and
    # a scrape's ?name[]=… filter reads them from each collection
    registry = CollectorRegistry(auto_describe=False, support_collectors_without_names=True)
    registry.register(collector)
    return registry


def _text(found: list[Metric], fmt: Format) -> bytes:
    registry = _registry(_Families(found))
    if fmt is Format.prometheus:
        from prometheus_client.exposition import generate_latest

        return bytes(generate_latest(registry))
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    return bytes(generate_openmetrics(registry))  # type: ignore[no-untyped-call]


def _document(snapshot: MetricsSnapshot, found: list[Metric]) -> dict[str, Any]:
    return {
        "at": iso_ms(snapshot.at_ms),
        "ok": snapshot.ok,
        "errors": {group: err.message for group, err in sorted(snapshot.errors.items())},
        "families": [
            {
                "name": m.name,
                "type": m.type,
                "unit": m.unit or None,
                "help": m.documentation,
                "samples": [
                    {"name": s.name, "labels": dict(s.labels), "value": float(s.value)}
                    for s in m.samples
                ],
            }
            for m in found
        ],
    }


def _failed(snapshot: MetricsSnapshot) -> str:
    return "; ".join(f"{group}: {err.message}" for group, err in sorted(snapshot.errors.items()))


def _open(db: str | None) -> Engine:
    """The database, read-only, proved to answer, and a role that sees every tenant."""
    from agora_cli.store._metrics import check_metrics_privilege

    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        check_metrics_privilege(conn)
        conn.rollback()
    return engine


# --- agora metrics ------------------------------------------------------------------------------


@app.callback()
def metrics(
    ctx: typer.Context,
    fmt: Annotated[
        Format | None,
        typer.Option(
            "--format",
            help="openmetrics (the default), or prometheus: the text format node-exporter's "
            "textfile collector reads.",
            show_default=False,
            case_sensitive=False,
        ),
    ] = None,
    frames_ttl: FramesTtlOpt = 3600,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print agora's figures once, for Prometheus: what waits for a decision and for how long,
    approved work by state, runs of the last hour, spend today and this month by model and
    tenant, every saved budget, the fold's lag, frames awaiting purge, the schema's revision.

    Reads every tenant (on PostgreSQL with row-level security: as a superuser or a BYPASSRLS
    role). A group that cannot be read is left out, named on stderr (`error: …`), and the exit
    code is that failure's (the figures that were read are still printed); `agora metrics
    serve` serves the same figures over HTTP.

    For node-exporter's textfile collector, from cron: agora metrics --format prometheus >
    agora.prom.tmp && mv agora.prom.tmp /var/lib/node_exporter/textfile/agora.prom

    Example: agora metrics --format prometheus
    """
    if ctx.invoked_subcommand is not None:
        return
    if as_json and fmt is not None:
        raise InvalidInput("choose one of --json and --format")
    from agora_cli.store._metrics import collect_metrics

    engine = _open(db)
    snapshot = collect_metrics(engine, frames_ttl_s=frames_ttl)
    history = History()
    history.record(snapshot)
    found = families(snapshot, history)
    if as_json:
        emit_json(_document(snapshot, found))
    else:
        sys.stdout.write(_text(found, fmt or Format.openmetrics).decode("utf-8"))
    if snapshot.errors:
        error_line(f"metrics not read for {_failed(snapshot)}")
        raise typer.Exit(max(err.exit_code for err in snapshot.errors.values()))


# --- agora metrics serve ------------------------------------------------------------------------


def _host(text: str) -> str:
    if text == "localhost":
        return text
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise InvalidInput(
            f"--host {text!r} is not an IP address (such as 127.0.0.1, 0.0.0.0 or ::) or localhost"
        ) from None


def _interval_s(text: str) -> float:
    ms = parse_duration(text, what="--interval", max_ms=MAX_INTERVAL_MS)
    if ms < MIN_INTERVAL_MS:
        raise InvalidInput(f"--interval {text!r} is shorter than 5s")
    return ms / 1000


class Exporter:
    """The figures read every ``interval_s`` in a background thread, served over HTTP from the
    families of the last collection."""

    def __init__(self, engine: Engine, *, interval_s: float, frames_ttl_s: int) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.frames_ttl_s = frames_ttl_s
        self.history = History()
        self.current = _Families()
        self.stop = threading.Event()
        self._said: dict[str, str] = {}
        from agora_cli.store._metrics import MetricsCache

        self.cache = MetricsCache()  # the month's folded days' sums, while those days stand

    def collect(self) -> MetricsSnapshot:
        from agora_cli.store._metrics import collect_metrics

        snapshot = collect_metrics(self.engine, frames_ttl_s=self.frames_ttl_s, cache=self.cache)
        self.history.record(snapshot)
        self.current.found = families(snapshot, self.history)  # one reference swap: atomic
        self._log(snapshot)
        return snapshot

    def _log(self, snapshot: MetricsSnapshot) -> None:
        """Say on stderr when a group starts failing (or fails otherwise) and when it recovers."""
        at = iso_ms(snapshot.at_ms)
        for group, err in sorted(snapshot.errors.items()):
            if self._said.get(group) != err.message:
                say(f"{at} metrics group {group} failed: {err.message}", style="yellow")
                self._said[group] = err.message
        for group in sorted(set(self._said) - set(snapshot.errors)):
            say(f"{at} metrics group {group} read again")
            del self._said[group]

    def _loop(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self.stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.interval_s
            try:
                self.collect()
            except Exception as exc:  # a bug in one round must not end the schedule
                what = f"{type(exc).__name__}: {scrub(str(exc))}"
                say(f"metrics collection failed: unexpected {what}")
            next_at = max(next_at, time.monotonic())  # a slow collection: the next one at once

    def serve(self, host: str, port: int) -> None:
        """Collect once, listen, then collect on schedule until SIGTERM or Ctrl-C."""
        import signal

        self.collect()
        httpd = _listen(host, port, self.current)
        shown = f"[{host}]" if ":" in host else host
        say(
            f"serving http://{shown}:{port}/metrics, read every {self.interval_s:g} s "
            "(Ctrl-C stops)"
        )
        listener = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        threads = [listener, threading.Thread(target=self._loop, daemon=True)]
        previous = signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        for thread in threads:
            thread.start()
        try:
            while not self.stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            self.stop.set()
            httpd.shutdown()
            httpd.server_close()
            threads[1].join(timeout=5)
            signal.signal(signal.SIGTERM, previous)
            self.engine.dispose()
        say("stopped")


def _listen(host: str, port: int, current: _Families) -> Any:
    """An HTTP server on ``host:port`` answering ``/metrics`` from ``current`` (``/``: a pointer
    to it; anything else: 404)."""
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

    metrics_app = make_wsgi_app(_registry(current))

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            result: list[bytes] = metrics_app(environ, start_response)
            return result
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"agora metrics: see /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: agora serves /metrics\n"]

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        return make_server(host, port, application, Server, handler_class=Quiet)
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None


@app.command("serve")
def serve(
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="The TCP port to listen on (1-65535).")
    ] = 9464,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="The address to listen on: an IP address, or localhost (0.0.0.0: every IPv4 "
            "interface).",
        ),
    ] = "127.0.0.1",
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            metavar="DURATION",
            help="How often the figures are read: 5s to 1h (a scrape gets the last reading).",
        ),
    ] = "30s",
    frames_ttl: FramesTtlOpt = 3600,
    db: DbOpt = None,
) -> None:
    """Serve the figures of `agora metrics` on http://HOST:PORT/metrics for Prometheus.

    The figures are read every --interval in the background; a scrape answers at once from the
    last reading and never queries the database. When the database fails, the endpoint stays up
    and says so: agora_metrics_up 0, agora_metrics_group_up{group} 0, and
    agora_metrics_last_success_timestamp_seconds stops advancing. Stops on SIGTERM or Ctrl-C
    (exit 0). The database must answer when it starts (else exit 3).

    Example: agora metrics serve --port 9464 --interval 30s --db postgresql://metrics@db/app
    """
    listen_on = _host(host)
    every = _interval_s(interval)
    Exporter(_open(db), interval_s=every, frames_ttl_s=frames_ttl).serve(listen_on, port)
