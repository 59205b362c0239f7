"""A batch of settlements is checked with each check's fast test inline
(``leases._checked_settlements``) exactly as the checks themselves check it: the same accepted
batches with the same ids and results, and the same first error for every hostile batch.

The checks are pure (no statement runs before them), so the property is tested here without a
database; the batch tests (``test_proposals_batch``) run the store's settle on every dialect.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals.leases import _checked_settlements
from agora_cli.store._proposals.model import Settlement, check_lease, check_settle
from agora_cli.store._values import BIGINT_MAX, MAX_IDENTITY_UNITS, check_identity, dump_json


def checked_by_the_checks(settlements: list[Any]) -> tuple[list[str], list[str | None]]:
    """The reference: each settlement through ``check_identity``, ``check_lease`` and
    ``check_settle`` in turn, its result dumped, then the duplicates."""
    if not 1 <= len(settlements) <= 1000:
        raise InvalidInput(f"settle between 1 and 1000 outcomes at once, not {len(settlements)}")
    texts: list[str | None] = []
    for item in settlements:
        if not isinstance(item, Settlement):
            raise InvalidInput("each settlement must be a Settlement", param="settlements")
        check_identity("id", item.proposal_id)
        check_lease(item.token, item.generation)
        check_settle(item.outcome, item.error)
        texts.append(None if item.result is None else dump_json("result", item.result))
    ids = [item.proposal_id for item in settlements]
    if len(set(ids)) != len(ids):
        raise InvalidInput("a proposal appears twice in one batch of settlements")
    return ids, texts


class LookAlike(NamedTuple):
    """Every field a settlement has, but not a ``Settlement``."""

    proposal_id: Any
    token: Any
    generation: Any
    outcome: Any
    result: Any = None
    error: Any = None


class SubSettlement(Settlement):
    pass


class Text(str):
    pass


class Int(int):
    pass


SHARED = {"ok": True}  # one result object for many settlements, as a batch worker's
TEXTS = st.one_of(
    st.from_regex(r"[a-z0-9_-]{1,12}", fullmatch=True),
    st.text(max_size=6),  # any character: non-ASCII, NUL, blanks, lone surrogates
    st.sampled_from(["", " ", "\t\n", "a\x00b", "é", "\ud800", "x" * MAX_IDENTITY_UNITS]),
    st.just("y" * (MAX_IDENTITY_UNITS + 1)),
    st.just("é" * MAX_IDENTITY_UNITS),  # 255 characters, fine as UTF-16 units
)
VALUES = st.one_of(TEXTS, st.builds(Text, TEXTS), st.sampled_from([None, 7, b"p1", 1.5]))
GENERATIONS = st.one_of(
    st.integers(min_value=1, max_value=9),
    st.sampled_from([0, -1, BIGINT_MAX, BIGINT_MAX + 1, True, False, 2.0, "1", None, Int(3)]),
)
OUTCOMES = st.sampled_from(["succeeded", "failed", "done", "", None, 1, Text("failed")])
RESULTS = st.one_of(
    st.just(None),
    st.just(SHARED),
    st.sampled_from([{"n": 1}, [1, 2], "text", 3, {"x": float("nan")}, {1, 2}, {"a": b"b"}]),
    st.builds(dict, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
)
ERRORS = st.one_of(st.just(None), VALUES)
FIELDS = ("pid", "token", "generation", "outcome", "result", "error", "kind")


@st.composite
def settlements(draw: st.DrawFn) -> list[Any]:
    """A batch of good settlements in which some have one field (or two) spoiled: each inline
    test must stand on its own."""
    n = draw(st.integers(min_value=1, max_value=6))
    batch: list[Any] = []
    for i in range(n):
        spoiled = set(draw(st.lists(st.sampled_from(FIELDS), max_size=2)))
        fields: tuple[Any, ...] = (
            draw(VALUES) if "pid" in spoiled else f"p{i}",
            draw(VALUES) if "token" in spoiled else "t" * 43,
            draw(GENERATIONS) if "generation" in spoiled else i + 1,
            draw(OUTCOMES) if "outcome" in spoiled else "succeeded",
            draw(RESULTS) if "result" in spoiled else SHARED,
            draw(ERRORS) if "error" in spoiled else None,
        )
        odd: Any = draw(st.sampled_from([SubSettlement, LookAlike]))
        batch.append(odd(*fields) if "kind" in spoiled else Settlement(*fields))
    if draw(st.booleans()):
        batch.append(batch[0])  # the same proposal twice
    return batch


def outcome_of(fn: Any, batch: list[Any]) -> tuple[str, Any]:
    try:
        return "ok", fn(batch)
    except Exception as exc:  # the kind and the message: a script reads both
        return type(exc).__name__, str(exc)


@settings(max_examples=800, deadline=None)
@given(settlements())
def test_a_batch_is_checked_as_the_checks_check_it(batch: list[Any]) -> None:
    assert outcome_of(_checked_settlements, batch) == outcome_of(checked_by_the_checks, batch)


def test_a_worker_batch_is_checked() -> None:
    """The usual batches: one shared result, per-job results, an error's text."""
    shared = [Settlement(f"p{i}", f"token-{i}", i + 1, "succeeded", SHARED) for i in range(100)]
    mixed = [Settlement(f"p{i}", "t", 1, "failed", {"n": i % 3}, "timed out") for i in range(9)]
    assert _checked_settlements(shared) == checked_by_the_checks(shared)
    assert _checked_settlements(shared)[1] == ['{"ok":true}'] * 100
    assert _checked_settlements(mixed) == checked_by_the_checks(mixed)
    assert _checked_settlements(mixed)[1] == [f'{{"n":{i % 3}}}' for i in range(9)]
