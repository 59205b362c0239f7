"""Short ids: a unique prefix of 8+ characters names an id, exactly, on every dialect."""

from __future__ import annotations

from typing import Any

import pytest

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import AmbiguousId, InvalidInput, NotFound
from agora_cli.store._proposals import NewProposal, Scope, create_proposal, find_proposal_id
from agora_cli.store._schema import run, thread
from agora_cli.store._short_ids import resolve_prefix, resolve_run_id, resolve_thread_id
from agora_cli.store._sqlexpr import escape_like, successor
from agora_cli.store._steps import start_run
from agora_cli.store._threads import create_thread

T0 = 1_767_225_600_000


def _threads(engine: Any, *ids: str) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        for thread_id in ids:
            create_thread(conn, actor_ref="alice", thread_id=thread_id, clock=clock)


def test_a_unique_prefix_names_the_id_and_an_exact_id_always_wins(engine: Any) -> None:
    _threads(engine, "3f2c9a1e-aaaa", "3f2c9a1e-bbbb", "7d00e1c2-cccc", "7d00e1c2-cccc-2")
    with engine.connect() as conn:
        assert resolve_thread_id(conn, "7d00e1c2-cccc") == "7d00e1c2-cccc"  # exact, also a prefix
        assert resolve_thread_id(conn, "7d00e1c2-cccc-") == "7d00e1c2-cccc-2"
        assert resolve_thread_id(conn, "3f2c9a1e-b") == "3f2c9a1e-bbbb"
        assert resolve_prefix(conn, thread, "9999999999", what="thread") is None
        with pytest.raises(NotFound, match="no thread"):
            resolve_thread_id(conn, "9999999999")


def test_two_ids_sharing_a_prefix_are_ambiguous_and_both_are_named(engine: Any) -> None:
    _threads(engine, "3f2c9a1e-aaaa", "3f2c9a1e-bbbb")
    with engine.connect() as conn, pytest.raises(AmbiguousId) as caught:
        resolve_thread_id(conn, "3f2c9a1e")
    assert caught.value.exit_code == 2 and isinstance(caught.value, InvalidInput)
    assert caught.value.matches == ("3f2c9a1e-aaaa", "3f2c9a1e-bbbb")
    assert "3f2c9a1e-aaaa" in str(caught.value) and "3f2c9a1e-bbbb" in str(caught.value)


def test_an_ambiguity_lists_a_few_and_says_there_are_more(engine: Any) -> None:
    _threads(engine, *(f"demo-thread-{n:02d}" for n in range(9)))
    with engine.connect() as conn, pytest.raises(AmbiguousId) as caught:
        resolve_thread_id(conn, "demo-thread")
    assert len(caught.value.matches) == 5
    assert "more than 5 threads" in str(caught.value) and "…" in str(caught.value)


def test_shorter_than_8_characters_is_never_a_prefix(engine: Any) -> None:
    _threads(engine, "abcdefgh-1", "t1")
    with engine.connect() as conn:
        assert resolve_thread_id(conn, "t1") == "t1"  # a short full id is fine
        with pytest.raises(NotFound, match="at least 8 characters"):
            resolve_thread_id(conn, "abcdefg")


@pytest.mark.parametrize(
    ("stored", "prefix"),
    [
        ("abcXdefgh-1", "abc_defg"),  # _ is not a wildcard
        ("abcXYZdefgh", "abc%defg"),  # % is not a wildcard
        ("ABCDEFGH-1", "abcdefgh"),  # case counts (SQLite's LIKE would ignore it)
        ("abcdefgh-1", "abcdefgh "),  # a trailing space counts (MySQL's PAD SPACE would not)
        ("abc/defgh-1", "abc//def"),  # the escape character itself
    ],
)
def test_a_prefix_matches_exactly(engine: Any, stored: str, prefix: str) -> None:
    _threads(engine, stored)
    with engine.connect() as conn:
        assert resolve_prefix(conn, thread, prefix) is None
        assert resolve_prefix(conn, thread, stored[:8]) == stored


def test_metacharacters_and_wide_characters_in_a_real_prefix(engine: Any) -> None:
    _threads(engine, "a_b%c/d\\e-1", "a_b%c/d\\f-2", "thread-😀-1", "thread-😀-2x")
    with engine.connect() as conn:
        assert resolve_prefix(conn, thread, "a_b%c/d\\e") == "a_b%c/d\\e-1"
        assert resolve_prefix(conn, thread, "thread-😀-2") == "thread-😀-2x"


def test_escape_and_successor() -> None:
    assert escape_like("a_b%c/d") == "a/_b/%c//d"
    assert successor("abc") == "abd"
    assert successor("ab\U0010ffff") == "ac"
    assert successor("a\ud7ff") == "a\ue000"
    assert successor("\U0010ffff") is None


def test_runs_resolve_too(engine: Any) -> None:
    _threads(engine, "t1")
    clock = ManualClock(T0)
    with engine.begin() as conn:
        for run_id in ("run-2026-0001", "run-2026-0002"):
            start_run(conn, thread_id="t1", actor_ref="alice", run_id=run_id, clock=clock)
    with engine.connect() as conn:
        assert resolve_run_id(conn, "run-2026-0002") == "run-2026-0002"
        assert resolve_run_id(conn, "run-2026-0001"[:-1] + "1") == "run-2026-0001"
        with pytest.raises(AmbiguousId):
            resolve_run_id(conn, "run-2026")
        assert resolve_prefix(conn, run, "run-2027") is None


def test_a_proposal_prefix_never_widens_the_scope(engine: Any) -> None:
    _threads(engine, "t1", "t2")
    clock = ManualClock(T0)
    mine = Scope("acme", "alice", "t1")
    theirs = Scope("acme", "alice", "t2")
    with engine.begin() as conn:
        for scope, pid in ((mine, "ap_0123456789-mine"), (theirs, "ap_0123456789-theirs")):
            create_proposal(
                conn, NewProposal(scope=scope, tool_name="refund", input={}, id=pid), clock=clock
            )
    with engine.connect() as conn:
        # both share "ap_0123456789", but within one scope the prefix names one proposal
        assert find_proposal_id(conn, "ap_0123456789", scope=mine) == "ap_0123456789-mine"
        assert find_proposal_id(conn, "ap_0123456789", scope=theirs) == "ap_0123456789-theirs"
        # the full id of a proposal of another scope finds nothing here, as a prefix does
        assert find_proposal_id(conn, "ap_0123456789-theirs", scope=mine) is None
        assert find_proposal_id(conn, "ap_0123456789-t", scope=mine) is None
        wrong_tenant = Scope(None, "alice", "t1")
        assert find_proposal_id(conn, "ap_0123456789", scope=wrong_tenant) is None
