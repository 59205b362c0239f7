"""Privileged jobs and workers under row-level security, tried as an attacker would.

On PostgreSQL every test here runs as a LOGIN that is a member of the app role (never the
superuser, never ``SET ROLE`` from one), with the other tenant's ids in hand: the worker's whole
lifecycle under a tenant, the fold refused to a tenant session and to the app role, outcomes
never delivered across tenants. The rows are written by the owner (the test's superuser).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import run_cli
from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import open_engine
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope, Settlement
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._rls import enable_rls
from agora_cli.store._schema import message, thread

T0 = 1_767_225_600_000


@dataclass(frozen=True)
class Cluster:
    """A provisioned database with row-level security on: the owner's URL, the app role, and
    the URL of a login that is a member of it."""

    owner_url: str
    app_role: str
    member_url: str


@pytest.fixture
def cluster(databases: Any) -> Iterator[Cluster]:
    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    owner = open_engine(url)
    ensure_agent_tables(owner)
    suffix = secrets.token_hex(5)
    role, login = f"agora_app_p_{suffix}", f"agora_login_p_{suffix}"
    enable_rls(owner, app_role=role)
    with owner.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN IN ROLE "{role}"')
    member = make_url(url).set(username=login, password=None)
    try:
        yield Cluster(url, role, member.render_as_string(hide_password=False))
    finally:
        with owner.begin() as conn:
            for name in (login, role):
                conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                conn.exec_driver_sql(f'DROP ROLE "{name}"')
        owner.dispose()


def add_thread(engine: Any, thread_id: str, tenant: str | None) -> str:
    """A thread and one message on it, written as the owner; the message's id."""
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id=thread_id, actor_ref="alice", tenant_ref=tenant, title="t",
                created_at=0, updated_at=0,
            )
        )  # fmt: skip
        conn.execute(
            message.insert().values(
                id=f"{thread_id}-m1", thread_id=thread_id, role="assistant", content="ok",
                seq=1, created_at=0,
            )
        )  # fmt: skip
    return f"{thread_id}-m1"


def test_the_whole_worker_lifecycle_runs_as_a_member_of_the_app_role_with_a_tenant(
    cluster: Cluster,
) -> None:
    owner = open_engine(cluster.owner_url)
    acme_msg = add_thread(owner, "t-acme", "acme")
    add_thread(owner, "t-globex", "globex")
    clock = ManualClock(T0)
    acme = ActionProposalStore(open_engine(cluster.member_url, tenant="acme"), clock)
    globex = ActionProposalStore(open_engine(cluster.member_url, tenant="globex"), clock)
    with acme.engine.connect() as conn:  # the login really is a plain member
        me = conn.execute(text("SELECT rolsuper, rolbypassrls FROM pg_roles "
                               "WHERE rolname = current_user")).one()  # fmt: skip
        assert tuple(me) == (False, False)
    scope = Scope("acme", "alice", "t-acme")
    made = [
        acme.create(
            NewProposal(scope, "refund", {"order": n}, run_id="r1", tool_call_id=f"c{n}")
        ).proposal
        for n in range(4)
    ]
    theirs_scope = Scope("globex", "alice", "t-globex")
    globex_made = globex.create(
        NewProposal(theirs_scope, "refund", {"o": 1}, run_id="r", tool_call_id="g")
    ).proposal
    for p in made:
        assert acme.decide(p.id, scope, "approved", "bob").outcome == "applied"
    globex.decide(globex_made.id, theirs_scope, "approved", "eve")

    # claim (a transaction) → renew, settle (autocommit on PostgreSQL) → deliver
    claimed = acme.claim(made[0].id, scope, "w1", 60_000)
    assert claimed.outcome == "claimed" and claimed.lease is not None
    lease = claimed.lease
    clock.advance(1_000)
    assert acme.renew(made[0].id, lease.token, lease.generation, 60_000).outcome == "renewed"
    settled = acme.settle(made[0].id, lease.token, lease.generation, "succeeded", {"ok": True})
    assert settled.outcome == "settled"
    assert acme.deliver_outcome(made[0].id, acme_msg).outcome == "delivered"

    # claim_next sees only acme's due work (globex's approved proposal stays globex's)
    one = acme.claim_next("w1", 60_000)
    assert one.outcome == "claimed" and one.work is not None and one.work.tenant_ref == "acme"
    batch = acme.claim_next("w1", 60_000, limit=10)
    assert {c.work.tenant_ref for c in batch if c.work} == {"acme"} and len(batch) == 2
    assert one.lease is not None
    step, following = acme.settle_and_claim_next(
        Settlement(one.work.id, one.lease.token, one.lease.generation, "succeeded"), "w1", 60_000
    )
    assert step.outcome == "settled" and following == []
    many = acme.settle_many(
        [Settlement(c.work.id, c.lease.token, c.lease.generation, "failed", error="x")
         for c in batch if c.work and c.lease]
    )  # fmt: skip
    assert [r.outcome for r in many] == ["settled", "settled"]
    # globex's work is still there for globex's worker, untouched by acme's
    theirs = globex.claim_next("w2", 60_000)
    assert theirs.outcome == "claimed" and theirs.work is not None
    assert theirs.work.id == globex_made.id
    with owner.connect() as conn:
        outcome = conn.execute(select(message.c.outcome).where(message.c.id == acme_msg)).scalar()
    assert outcome is not None and made[0].id in outcome
    for store in (acme, globex):
        store.engine.dispose()
    owner.dispose()


# --- no plaintext in logs and errors (finding 9) ------------------------------------------------

SECRET = "GLOBEX CONFIDENTIAL: merger with initech"


def test_a_failed_frame_flush_logs_no_frame_text(
    empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from agora_cli.store._frames import FrameWriter

    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    writer = FrameWriter(engine, "run-1", autoflush=False, auto_purge=False)
    writer.append({"type": "start"})  # the writer knows its next seq: the flush only inserts
    with engine.begin() as conn:  # the flush below then fails with the frame in its parameters
        conn.exec_driver_sql("DROP TABLE agent_stream_frame")
    with caplog.at_level("WARNING"), pytest.raises(RuntimeError), writer:
        writer.append({"type": "text-delta", "delta": SECRET})
        raise RuntimeError("the model call failed")
    logged = caplog.text
    assert "could not flush run 'run-1'" in logged and "agent_stream_frame" in logged
    assert "merger" not in logged and "GLOBEX" not in logged
    engine.dispose()


def test_an_engines_errors_never_show_bound_parameters(empty_url: str) -> None:
    from sqlalchemy.exc import DBAPIError

    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    with pytest.raises(DBAPIError) as caught, engine.begin() as conn:
        conn.execute(text("INSERT INTO agent_nowhere (x) VALUES (:x)"), {"x": SECRET})
    assert "hide_parameters" in str(caught.value) and "merger" not in str(caught.value)
    # what `--debug` prints: the traceback of agora's error chained from the driver's
    import traceback

    from agora_cli.store._engine import translate_error

    err = translate_error(caught.value)
    assert err is not None
    err.__cause__ = caught.value
    printed = "".join(traceback.format_exception(err))
    assert "agent_nowhere" in printed and "merger" not in printed
    engine.dispose()


# --- the fold is privileged (finding 6) --------------------------------------------------------

DAY = 86_400_000


def add_ledger(engine: Any, thread_id: str, tenant: str | None, *, at: int, n: int = 1) -> None:
    from agora_cli.store._usage import record_usage

    with engine.begin() as conn:
        for _ in range(n):
            record_usage(
                conn, thread_id=thread_id, actor_ref="alice", model_id="gpt-4o", purpose="chat",
                input_tokens=1000, output_tokens=100, tenant_ref=tenant,
                provider_cost_usd=0.01, clock=ManualClock(at),
            )  # fmt: skip


def fold_state(engine: Any) -> list[tuple[Any, ...]]:
    """The fold's days with ledger rows: (day, rows, dirty)."""
    from agora_cli.store._schema import usage_fold as f

    with engine.connect() as conn:
        q = select(f.c.day, f.c.rows, f.c.dirty).where(f.c.rows > 0).order_by(f.c.day)
        return [tuple(r) for r in conn.execute(q)]


def test_the_fold_is_refused_to_a_tenant_session_and_to_the_app_role(cluster: Cluster) -> None:
    from agora_cli.store._errors import InvalidInput
    from agora_cli.store._fold import fold

    owner = open_engine(cluster.owner_url)
    add_thread(owner, "t-acme", "acme")
    add_thread(owner, "t-globex", "globex")
    add_ledger(owner, "t-acme", "acme", at=T0 - 3 * DAY)
    add_ledger(owner, "t-globex", "globex", at=T0 - 3 * DAY, n=3)
    now = ManualClock(T0)
    env = {"AGORA_DATABASE_URL": cluster.member_url, "AGORA_TENANT": "acme"}
    for extra, tenant in ((), "acme"), (("--verify",), "acme"), ((), ""), (("--verify",), ""):
        result = run_cli("spend", "fold", *extra, env={**env, "AGORA_TENANT": tenant})
        assert result.exit_code == 2, result
        assert result.stdout == "" and "all match" not in result.stderr
        assert "superuser or a BYPASSRLS role" in result.stderr
        assert ("tenant 'acme'" in result.stderr) == bool(tenant)
    member = open_engine(cluster.member_url, tenant="acme")
    with pytest.raises(InvalidInput, match="privileged job"):
        fold(member, clock=now)
    assert fold_state(owner) == []
    # By hand, the member cannot write the fold tables either (SELECT only), tenant or not.
    with member.connect() as conn:
        for sql in (
            "INSERT INTO agent_usage_fold (day, rows, folded_at, dirty) VALUES (1, 1, 1, 0)",
            "UPDATE agent_usage_fold SET dirty = 0",
            "DELETE FROM agent_usage_daily",
        ):
            with pytest.raises(DBAPIError, match="permission denied"):
                conn.exec_driver_sql(sql)
            conn.rollback()
    # The superuser folds every tenant's rows.
    assert fold(owner, clock=now).rows == 4
    assert fold_state(owner) == [((T0 - 3 * DAY) // DAY, 4, 0)]
    member.dispose()
    owner.dispose()


def test_a_tenant_deleting_its_thread_leaves_the_fold_to_the_privileged_verify(
    cluster: Cluster,
) -> None:
    from agora_cli.store._fold import fold, verify
    from agora_cli.store._threads import delete_thread

    owner = open_engine(cluster.owner_url)
    add_thread(owner, "t-acme", "acme")
    add_thread(owner, "t-globex", "globex")
    add_ledger(owner, "t-acme", "acme", at=T0 - 3 * DAY)
    add_ledger(owner, "t-globex", "globex", at=T0 - 3 * DAY)
    fold(owner, clock=ManualClock(T0))
    member = open_engine(cluster.member_url, tenant="acme")
    with member.begin() as conn:  # no permission error: the member marks nothing
        assert delete_thread(conn, "t-acme").deleted["agent_thread"] == 1
    assert fold_state(owner)[0][2] == 0
    assert [d.isoformat() for d in verify(owner).mismatched] == ["2025-12-29"]
    assert fold_state(owner)[0][2] == 1
    member.dispose()
    owner.dispose()


def test_a_session_tenant_refuses_the_fold_on_every_dialect(empty_url: str) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    add_thread(engine, "t-acme", "acme")
    add_ledger(engine, "t-acme", "acme", at=T0 - 3 * DAY)
    engine.dispose()
    result = run_cli(
        "spend", "fold", "--json", env={"AGORA_DATABASE_URL": empty_url, "AGORA_TENANT": "acme"}
    )
    assert result.exit_code == 2, result
    engine = open_engine(empty_url)
    assert fold_state(engine) == []
    engine.dispose()


# --- frames die with their thread (finding 5) --------------------------------------------------


def add_frames(engine: Any, run_id: str, text_: str = SECRET) -> None:
    from agora_cli.store._schema import stream_frame

    with engine.begin() as conn:
        conn.execute(
            stream_frame.insert(),
            [
                {"run_id": run_id, "seq": n, "frame": f'{{"type":"text","t":"{text_}"}}',
                 "created_at": T0}
                for n in (1, 2)
            ],
        )  # fmt: skip


def frames_of(engine: Any) -> dict[str, int]:
    from sqlalchemy import func

    from agora_cli.store._schema import stream_frame as sf

    with engine.connect() as conn:
        q = select(sf.c.run_id, func.count()).group_by(sf.c.run_id)
        return {str(r): int(n) for r, n in conn.execute(q)}


def test_deleting_a_thread_deletes_its_runs_frames(empty_url: str) -> None:
    from agora_cli.store._schema import run
    from agora_cli.store._threads import delete_thread

    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    add_thread(engine, "t1", None)
    add_thread(engine, "t2", None)
    with engine.begin() as conn:
        for rid, tid in (("r1", "t1"), ("r2", "t2")):
            conn.execute(
                run.insert().values(id=rid, thread_id=tid, actor_ref="alice", status="done",
                                    started_at=T0)
            )  # fmt: skip
        # a run the runtime names on a message only (no agent_run row)
        conn.execute(message.update().where(message.c.id == "t1-m1").values(run_id="r1-msg"))
    mysql = engine.dialect.name in ("mysql", "mariadb")
    # On MySQL 'r1 ' is another run (PAD SPACE would match it to r1): its frames stay.
    for rid in ("r1 " if mysql else "r1", "r1-msg", "r2"):
        add_frames(engine, rid)
    with engine.begin() as conn:
        gone = delete_thread(conn, "t1")
    assert gone.deleted["agent_stream_frame"] == (2 if mysql else 4)
    assert frames_of(engine) == ({"r1 ": 2, "r2": 2} if mysql else {"r2": 2})
    engine.dispose()


def test_a_tenant_deleting_its_thread_leaves_no_frame_for_anyone(cluster: Cluster) -> None:
    from agora_cli.store._schema import run
    from agora_cli.store._threads import delete_thread

    owner = open_engine(cluster.owner_url)
    add_thread(owner, "t-globex", "globex")
    with owner.begin() as conn:
        conn.execute(
            run.insert().values(id="r-g", thread_id="t-globex", actor_ref="alice",
                                tenant_ref="globex", status="done", started_at=T0)
        )  # fmt: skip
    add_frames(owner, "r-g")
    globex = open_engine(cluster.member_url, tenant="globex")
    assert frames_of(globex) == {"r-g": 2}
    with globex.begin() as conn:
        assert delete_thread(conn, "t-globex").deleted["agent_stream_frame"] == 2
    untenanted = open_engine(cluster.member_url)
    assert frames_of(untenanted) == {} and frames_of(owner) == {}
    for engine in (globex, untenanted, owner):
        engine.dispose()


# --- a child row carries its parent's tenant (finding 1, the store's side) ---------------------


def test_the_store_refuses_a_child_row_on_another_tenants_thread(empty_url: str) -> None:
    from agora_cli.store._errors import NotFound
    from agora_cli.store._schema import action_proposal, run, token_usage
    from agora_cli.store._steps import start_run

    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    add_thread(engine, "t-globex", "globex")
    add_thread(engine, "t-none", None)
    store = ActionProposalStore(engine, ManualClock(T0))
    thread_id = "t-globex"
    with pytest.raises(NotFound, match=f"no thread '{thread_id}' of tenant 'acme'"):
        with engine.begin() as conn:
            start_run(conn, thread_id=thread_id, actor_ref="a", tenant_ref="acme")
    with pytest.raises(NotFound, match="of tenant 'acme'"):
        add_ledger(engine, thread_id, "acme", at=T0)
    with pytest.raises(NotFound, match="of tenant 'acme'"):
        store.create(
            NewProposal(Scope("acme", "a", thread_id), "refund", {}, run_id="r", tool_call_id="c")
        )
    # an untenanted (shared) thread takes any tenant's rows: the demo's nightly summaries
    add_ledger(engine, "t-none", "acme", at=T0)
    # the thread's own tenant, and rows with no tenant_ref (the thread's), are written
    with engine.begin() as conn:
        start_run(conn, thread_id="t-globex", actor_ref="a", tenant_ref="globex", run_id="r1")
        start_run(conn, thread_id="t-globex", actor_ref="a", run_id="r2")
    add_ledger(engine, "t-globex", "globex", at=T0)
    add_ledger(engine, "t-globex", None, at=T0)
    with engine.connect() as conn:
        for table, n in ((run, 2), (token_usage, 3), (action_proposal, 0)):
            assert len(conn.execute(select(table.c.id)).all()) == n, table.name
    engine.dispose()


def test_an_outcome_is_never_delivered_into_another_tenants_thread(empty_url: str) -> None:
    """A proposal written for acme on globex's thread before the store checked it (here by
    hand): approved, claimed and settled, its outcome is not written into globex's thread."""
    from agora_cli.store._errors import NotFound
    from agora_cli.store._schema import action_proposal

    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    globex_msg = add_thread(engine, "t-globex", "globex")
    with engine.begin() as conn:
        conn.execute(
            action_proposal.insert().values(
                id="p-x", idempotency_key="p-x", tenant_ref="acme", actor_ref="a",
                thread_id="t-globex", tool_name="refund", input="{}", created_at=T0,
                updated_at=T0,
            )
        )  # fmt: skip
    clock = ManualClock(T0)
    store = ActionProposalStore(engine, clock)
    scope = Scope("acme", "a", "t-globex")
    assert store.decide("p-x", scope, "approved", "bob").outcome == "applied"
    claimed = store.claim("p-x", scope, "w", 60_000)
    assert claimed.lease is not None
    lease = claimed.lease
    assert store.settle(
        "p-x", lease.token, lease.generation, "succeeded", {"x": SECRET}
    ).outcome == ("settled")
    with pytest.raises(NotFound, match="another tenant's"):
        store.deliver_outcome("p-x", globex_msg)
    with engine.connect() as conn:
        assert conn.execute(select(message.c.outcome)).scalar() is None
        delivered = select(action_proposal.c.outcome_delivered_at)
        assert conn.execute(delivered).scalar() is None
    engine.dispose()


def test_as_a_member_of_the_app_role_acme_cannot_write_onto_globexs_thread(
    cluster: Cluster,
) -> None:
    from agora_cli.store._errors import NotFound
    from agora_cli.store._steps import start_run

    owner = open_engine(cluster.owner_url)
    add_thread(owner, "t-globex", "globex")
    acme = open_engine(cluster.member_url, tenant="acme")
    with pytest.raises(NotFound, match="of tenant 'acme'"):
        with acme.begin() as conn:
            start_run(conn, thread_id="t-globex", actor_ref="a", tenant_ref="acme")
    with pytest.raises(NotFound, match="of tenant 'acme'"):
        add_ledger(acme, "t-globex", "acme", at=T0)
    store = ActionProposalStore(acme, ManualClock(T0))
    with pytest.raises(NotFound):
        store.create(
            NewProposal(Scope("acme", "a", "t-globex"), "refund", {}, run_id="r", tool_call_id="c")
        )
    with owner.connect() as conn:
        counts = conn.execute(
            text("SELECT (SELECT count(*) FROM agent_run), (SELECT count(*) FROM "
                 "agent_token_usage), (SELECT count(*) FROM agent_action_proposal)")
        ).one()  # fmt: skip
    assert tuple(counts) == (0, 0, 0)
    acme.dispose()
    owner.dispose()


def test_frames_purge_as_the_app_role_purges_the_tenants_frames(cluster: Cluster) -> None:
    from agora_cli.store._schema import run

    owner = open_engine(cluster.owner_url)
    for tenant in ("acme", "globex"):
        add_thread(owner, f"t-{tenant}", tenant)
        with owner.begin() as conn:
            conn.execute(
                run.insert().values(id=f"r-{tenant}", thread_id=f"t-{tenant}", actor_ref="a",
                                    tenant_ref=tenant, status="done", started_at=T0)
            )  # fmt: skip
        add_frames(owner, f"r-{tenant}")  # written at T0: long expired
    env = {"AGORA_DATABASE_URL": cluster.member_url, "AGORA_TENANT": "acme"}
    result = run_cli("frames", "purge", "--ttl", "60", "--json", env=env)
    assert result.exit_code == 0, result
    assert '"rows_deleted": 2' in result.stdout and '"runs_purged": 1' in result.stdout
    assert frames_of(owner) == {"r-globex": 2}  # globex's are not acme's to purge
    owner.dispose()
