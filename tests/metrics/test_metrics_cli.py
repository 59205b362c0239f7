"""`agora metrics`: the exposition as Prometheus and promtool read it, hostile label values,
bounded label sets, `--json`, the exit codes; and `serve`'s bounds, checked before it listens."""

from __future__ import annotations

import re
import socket
import subprocess
from typing import Any

import pytest
from helpers import exec_sql, no_data, run_agora, run_cli

from agora_cli.cli.metrics import LABEL_CHARS, OTHER, SERIES_CAP, bounded, label_value
from agora_cli.store._budgets import set_budget
from agora_cli.store._clock import DAY_MS
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._schema import run, thread, token_usage
from agora_cli.store._threads import create_thread
from agora_cli.store._usage import record_usage

# Every family `agora metrics` exports on a database where every group reads and something is
# in each (the demo's data set).
FAMILIES = {
    "agora_build",
    "agora_metrics_up",
    "agora_metrics_group_up",
    "agora_metrics_group_duration_seconds",
    "agora_metrics_errors",
    "agora_metrics_collections",
    "agora_metrics_collect_duration_seconds",
    "agora_metrics_last_collect_timestamp_seconds",
    "agora_metrics_last_success_timestamp_seconds",
    "agora_schema_current",
    "agora_schema_problems",
    "agora_schema",
    "agora_proposals_pending",
    "agora_proposals_oldest_pending_age_seconds",
    "agora_proposals_expiring_within_hour",
    "agora_proposals_past_expiry",
    "agora_executions",
    "agora_executions_oldest_queued_age_seconds",
    "agora_runs_last_hour",
    "agora_spend_usd",
    "agora_spend_turns",
    "agora_spend_unpriced_turns",
    "agora_spend_tokens",
    "agora_budget_limit_usd",
    "agora_budget_limit_tokens",
    "agora_budget_used_usd",
    "agora_budget_used_tokens",
    "agora_budget_used_ratio",
    "agora_budget_warn_ratio",
    "agora_budget_unpriced_turns",
    "agora_budget_state",
    "agora_budgets",
    "agora_fold_unfolded",
    "agora_fold_dirty",
    "agora_frames_awaiting_purge_runs",
    "agora_frames_awaiting_purge_rows",
}
# The fold's last time and this month's coverage appear only once something was folded and
# the month has days before today.
SOMETIMES = {"agora_fold_last_folded_timestamp_seconds", "agora_spend_fold_coverage_ratio"}
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def openmetrics_families(text: str) -> dict[str, Any]:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def prometheus_families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def check_metrics(promtool: str, text: str) -> None:
    """promtool parses and lints the Prometheus text format (exit 0: no problem)."""
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def samples(families: dict[str, Any], name: str) -> list[Any]:
    return list(families[name].samples) if name in families else []


# --- the exposition on every dialect --------------------------------------------------------------


def test_both_formats_parse_and_lint_on_the_demo(demo_url: str, promtool: str) -> None:
    om = run_cli("metrics", "--db", demo_url)
    assert om.exit_code == 0, om.stderr
    assert om.stderr == "" and om.stdout.endswith("# EOF\n")
    parsed = openmetrics_families(om.stdout)
    assert FAMILIES <= set(parsed) <= FAMILIES | SOMETIMES
    assert [s.value for s in samples(parsed, "agora_metrics_up")] == [1.0]
    states = {s.labels["state"]: s.value for s in samples(parsed, "agora_budgets")}
    assert states == {"ok": 1.0, "warning": 1.0, "exhausted": 1.0}  # the demo saves three
    plain = run_cli("metrics", "--format", "prometheus", "--db", demo_url)
    assert plain.exit_code == 0 and plain.stderr == ""
    assert "# EOF" not in plain.stdout
    flat = prometheus_families(plain.stdout)
    assert {"agora_build_info", "agora_schema_info", "agora_metrics_errors"} <= set(flat)
    assert flat["agora_metrics_errors"].type == "counter"
    check_metrics(promtool, plain.stdout)


def _hostile(dialect: str) -> list[str]:
    found = [
        "evil\n# TYPE agora_injected counter\nagora_injected_total 1e9\n",
        'q"uote}{,=x="y"',
        "back\\slash\\",
        "\x1b[31mred\x1b[0m\r\tbell\x07",
        "\u202eevil\u2066 \U0001f600",
        "L" * 255,  # the widest identity a column holds
    ]
    if dialect != "postgresql":  # PostgreSQL refuses NUL in text
        found.append("nul\x00byte")
    return found


def _write_hostile(url: str, dialect: str) -> list[str]:
    """Tenants, models, tools, budget scopes and run statuses of hostile bytes, written as
    another writer would (raw rows where agora's own API would refuse them)."""
    from agora_cli.store._engine import open_engine

    names = _hostile(dialect)
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            for n, name in enumerate(names):
                conn.execute(
                    thread.insert(),
                    {
                        "id": f"t-{n}",
                        "actor_ref": "a",
                        "tenant_ref": name,
                        "title": "",
                        "created_at": 0,
                        "updated_at": 0,
                    },
                )
        with engine.begin() as conn:
            for n, name in enumerate(names):
                conn.execute(
                    token_usage.insert(),
                    {
                        "id": f"u-{n}",
                        "thread_id": f"t-{n}",
                        "actor_ref": "a",
                        "tenant_ref": name,
                        "model_id": name,
                        "purpose": "chat",
                        "input_tokens": 1,
                        "output_tokens": 1,
                        "cost_usd": 0.5,
                        "cost_source": "provider",
                        "created_at": _now_ms(),
                    },
                )
                conn.execute(
                    run.insert(),
                    {
                        "id": f"r-{n}",
                        "thread_id": f"t-{n}",
                        "actor_ref": "a",
                        "status": name,
                        "started_at": _now_ms(),
                    },
                )
                set_budget(
                    conn,
                    scope_kind="tenant",
                    scope_ref=name.replace("\x00", "0"),
                    period="month",
                    created_by="ops",
                    limit_usd=1.0,
                )
        store = ActionProposalStore(engine)
        for n, name in enumerate(names):
            if "\x00" in name:
                continue  # identities refuse NUL: the raw rows above hold it
            store.create(
                NewProposal(scope=Scope(name, "a", f"t-{n}"), tool_name=name, input={}, id=f"p-{n}")
            )
        if dialect == "sqlite":  # no width limit: 10 kB, as another writer might leave it
            with engine.begin() as conn:
                conn.execute(
                    token_usage.update()
                    .where(token_usage.c.id == "u-0")
                    .values(model_id="M" * 10_000)
                )
    finally:
        engine.dispose()
    return names


def _now_ms() -> int:
    from agora_cli.store._clock import SystemClock

    return SystemClock().now_ms()


def test_hostile_label_values_cannot_break_the_format(
    db_url: str, dialect: str, promtool: str
) -> None:
    names = _write_hostile(db_url, dialect)
    om = run_cli("metrics", "--db", db_url)
    assert om.exit_code == 0, om.stderr
    parsed = openmetrics_families(om.stdout)
    assert "agora_injected" not in parsed and not any("injected" in n for n in parsed)
    assert FAMILIES <= set(parsed) <= FAMILIES | SOMETIMES
    plain = run_cli("metrics", "--format", "prometheus", "--db", db_url)
    flat = prometheus_families(plain.stdout)
    assert not any("injected" in n for n in flat)
    check_metrics(promtool, plain.stdout)
    values = [v for family in parsed.values() for s in family.samples for v in s.labels.values()]
    assert all(len(v) <= LABEL_CHARS for v in values)
    assert not any(RAW_CONTROL.search(v) for v in values)
    tenants = {s.labels["tenant"] for s in samples(parsed, "agora_spend_usd")}
    models = {s.labels["model"] for s in samples(parsed, "agora_spend_usd")}
    tools = {s.labels["tool"] for s in samples(parsed, "agora_proposals_pending")}
    statuses = {s.labels["status"] for s in samples(parsed, "agora_runs_last_hour")}
    refs = {s.labels["ref"] for s in samples(parsed, "agora_budget_used_ratio")}
    for name in names:
        shown = label_value(name)
        assert shown in tenants and shown in statuses, repr(name)
        assert shown in models or (dialect == "sqlite" and name == names[0])
        if "\x00" not in name:
            assert shown in tools and shown in refs
    # what the labels read: quotes and backslashes as they were, controls as visible escapes
    assert 'q"uote}{,=x="y"' in tenants and "back\\slash\\" in tenants
    assert "\\x1b[31mred\\x1b[0m\\x0d\\x09bell\\x07" in tenants
    assert "L" * (LABEL_CHARS - 1) + "…" in tenants
    if dialect == "sqlite":
        assert "M" * (LABEL_CHARS - 1) + "…" in models
    assert sum(s.value for s in samples(parsed, "agora_spend_usd") if s.labels["period"] == "day")
    total = sum(
        s.value for s in samples(parsed, "agora_spend_turns") if s.labels["period"] == "day"
    )
    assert total == len(names)


def test_label_sets_are_capped_with_an_other_series(db_url: str) -> None:
    from agora_cli.store._engine import open_engine

    n = SERIES_CAP + 50
    engine = open_engine(db_url)
    try:
        with engine.begin() as conn:
            for i in range(n):
                create_thread(conn, actor_ref="a", tenant_ref=f"t-{i:03d}", thread_id=f"t-{i:03d}")
        with engine.begin() as conn:
            for i in range(n):
                record_usage(
                    conn,
                    thread_id=f"t-{i:03d}",
                    actor_ref="a",
                    model_id="m",
                    purpose="chat",
                    input_tokens=1,
                    output_tokens=1,
                    provider_cost_usd=(i + 1) / 100,
                )
    finally:
        engine.dispose()
    got = run_cli("metrics", "--db", db_url)
    parsed = openmetrics_families(got.stdout)
    day = {
        s.labels["tenant"]: s.value
        for s in samples(parsed, "agora_spend_usd")
        if s.labels["period"] == "day"
    }
    assert len(day) == SERIES_CAP + 1
    kept = {f"t-{i:03d}" for i in range(50, n)}  # the largest spenders, by name
    assert set(day) == kept | {OTHER}
    assert day[OTHER] == pytest.approx(sum((i + 1) / 100 for i in range(50)))
    assert sum(day.values()) == pytest.approx(sum((i + 1) / 100 for i in range(n)))
    other = [s for s in samples(parsed, "agora_spend_turns") if s.labels["tenant"] == OTHER]
    assert {s.labels["model"] for s in other} == {OTHER}
    assert sorted(s.value for s in other) == [50.0, 50.0]  # today and this month


def test_the_example_alerts_name_only_exported_families() -> None:
    from helpers import ROOT

    rules = (ROOT / "examples" / "alerts.yml").read_text()
    exprs = " ".join(re.findall(r"expr: (.*)", rules))
    named = set(re.findall(r"\bagora_[a-z_]+", exprs))
    assert named and named <= FAMILIES, named - FAMILIES


# --- bounded(): the label rules alone ---------------------------------------------------------


def test_bounded_escapes_cuts_merges_and_caps() -> None:
    long_a, long_b = "x" * 10_000 + "a", "x" * 10_000 + "b"
    rows = [
        (("day", long_a), (1.0,)),
        (("day", long_b), (2.0,)),  # cut to the same value as long_a: one series, added
        (("day", "\x1b"), (None,)),
        (("day", None), (4.0,)),
    ]
    got = dict(bounded(rows, fixed=1, rank=lambda v: -(v[0] or 0)))
    assert got == {
        ("day", "x" * (LABEL_CHARS - 1) + "…"): (3.0,),
        ("day", "\\x1b"): (None,),
        ("day", ""): (4.0,),
    }
    many = [(("month", f"k{i}"), (float(i),)) for i in range(SERIES_CAP + 3)]
    many.append((("month", OTHER), (1000.0,)))  # a real key named "other" is added to the rest
    capped = dict(bounded(many, fixed=1, rank=lambda v: -(v[0] or 0)))
    # "other" (the largest) and k4..k102 are the SERIES_CAP kept; k0..k3 are added to "other"
    assert len(capped) == SERIES_CAP
    assert ("month", "k3") not in capped and ("month", "k4") in capped
    assert capped[("month", OTHER)] == (1000.0 + 0 + 1 + 2 + 3,)
    fewer = dict(bounded(many[:-1], fixed=1, rank=lambda v: -(v[0] or 0)))
    assert len(fewer) == SERIES_CAP + 1 and fewer[("month", OTHER)] == (0.0 + 1 + 2,)


def test_label_value_bounds() -> None:
    assert label_value(None) == ""
    assert label_value("a\nb") == "a\\x0ab"
    assert len(label_value("é" * 500)) == LABEL_CHARS


# --- --json, errors and exit codes -------------------------------------------------------------


def test_json_is_one_document_of_the_same_families(demo_url: str) -> None:
    got = run_cli("metrics", "--json", "--db", demo_url)
    assert got.exit_code == 0 and got.stderr == ""
    doc = got.json()
    assert set(doc) == {"at", "ok", "errors", "families"}
    assert doc["ok"] is True and doc["errors"] == {}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["at"])
    names = {f["name"] for f in doc["families"]}
    assert FAMILIES <= names <= FAMILIES | SOMETIMES
    usd = next(f for f in doc["families"] if f["name"] == "agora_spend_usd")
    assert usd["type"] == "gauge" and usd["unit"] == "usd" and usd["help"]
    assert all(set(s) == {"name", "labels", "value"} for s in usd["samples"])
    assert all(isinstance(s["value"], float) for s in usd["samples"])


def test_a_failing_group_is_left_out_named_and_exits_with_its_code(empty_url: str) -> None:
    assert run_cli("db", "provision", "--db", empty_url).exit_code == 0
    from agora_cli.store._engine import open_engine

    engine = open_engine(empty_url)
    exec_sql(engine, "DROP TABLE agent_budget")
    engine.dispose()
    got = run_cli("metrics", "--db", empty_url)
    assert got.exit_code == 1  # SchemaDrift: the answer is negative
    assert got.stderr.count("\n") == 1
    assert got.stderr.startswith("error: metrics not read for budgets: table agent_budget ")
    parsed = openmetrics_families(got.stdout)
    assert "agora_budgets" not in parsed and "agora_spend_usd" in parsed
    assert [s.value for s in samples(parsed, "agora_metrics_up")] == [0.0]
    up = {s.labels["group"]: s.value for s in samples(parsed, "agora_metrics_group_up")}
    assert up["budgets"] == 0.0 and up["inbox"] == 1.0
    assert "agora_budget_used_ratio" not in parsed
    assert [s.value for s in samples(parsed, "agora_metrics_last_success_timestamp_seconds")] == [
        0.0
    ]
    as_json = run_cli("metrics", "--json", "--db", empty_url)
    assert as_json.exit_code == 1
    doc = as_json.json()
    assert doc["ok"] is False and list(doc["errors"]) == ["budgets"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--format", "yaml"), "--format"),
        (("--json", "--format", "prometheus"), "choose one of --json and --format"),
        (("--frames-ttl", "0"), "--frames-ttl"),
    ],
)
def test_bad_input_is_exit_2_before_anything_runs(argv: tuple[str, ...], says: str) -> None:
    got = run_cli("metrics", *argv, "--db", "sqlite:////nonexistent/agora.db")
    assert got.exit_code == 2 and no_data(got)
    assert got.stderr.startswith("error: ") and says in got.stderr


def test_an_unreachable_database_is_exit_3(tmp_path: Any) -> None:
    got = run_cli("metrics", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert got.exit_code == 3 and got.stdout == "" and "no database at" in got.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--interval", "1s"), "shorter than 5s"),
        (("--interval", "2h"), "outside 1s"),
        (("--interval", "soon"), "not a duration"),
        (("--port", "0"), "--port"),
        (("--port", "65536"), "--port"),
        (("--host", ""), "not an IP address"),
        (("--host", "example.com"), "not an IP address"),
        (("--host", "999.1.1.1"), "not an IP address"),
        (("--frames-ttl", "-1"), "--frames-ttl"),
    ],
)
def test_serve_bounds_its_options_before_it_connects(argv: tuple[str, ...], says: str) -> None:
    # the database does not exist: a check made after connecting would be exit 3
    got = run_cli("metrics", "serve", *argv, "--db", "sqlite:////nonexistent/agora.db")
    assert got.exit_code == 2, got.stderr
    assert got.stderr.startswith("error: ") and says in got.stderr and got.stdout == ""


def test_serve_on_a_port_in_use_is_exit_2(tmp_path: Any, free_port: Any) -> None:
    db_url = f"sqlite:///{tmp_path / 'agora.db'}"
    assert run_cli("db", "provision", "--db", db_url).exit_code == 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        got = run_agora("metrics", "serve", "--port", str(port), "--db", db_url, timeout=60)
    assert got.exit_code == 2
    assert f"error: cannot listen on 127.0.0.1 port {port}" in got.stderr


def test_a_day_folded_shows_the_fold_families(db_url: str) -> None:
    from agora_cli.store._clock import ManualClock, SystemClock
    from agora_cli.store._engine import open_engine
    from agora_cli.store._fold import fold

    now = SystemClock().now_ms()
    clock = ManualClock(now - 3 * DAY_MS)
    engine = open_engine(db_url)
    try:
        with engine.begin() as conn:
            create_thread(conn, actor_ref="a", thread_id="t", clock=clock)
            record_usage(
                conn, thread_id="t", actor_ref="a", model_id="m", purpose="chat",
                input_tokens=1, output_tokens=1, clock=clock,
            )  # fmt: skip
        fold(engine)
    finally:
        engine.dispose()
    parsed = openmetrics_families(run_cli("metrics", "--db", db_url).stdout)
    assert [s.value for s in samples(parsed, "agora_fold_unfolded")] == [0.0]
    assert samples(parsed, "agora_fold_last_folded_timestamp_seconds")[0].value >= now / 1000 - 60
