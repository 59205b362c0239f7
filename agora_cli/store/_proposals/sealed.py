"""Proposals' sealed columns: ``input``, ``card`` and ``result`` of a keyed tenant's proposal.

A proposal's values are sealed for its own ``tenant_ref`` and its id (``sealing.SEALED_COLUMNS``):
on create (``decisions.create_proposal``), on settle (the result, ``seal_results``) and by
``db seal`` for rows already there. Readers open them here — one key read for a batch, none when
nothing is sealed; without the KEK a sealed value reads as ``SEALED_MARKER`` (a worker that must
run the tool needs the KEK). What the inbox and the worker filter on (tool name, decision,
states, times) stays plain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter
from typing import TYPE_CHECKING

from sqlalchemy import exists, select

from agora_cli.store._proposals.model import ClaimResult, Proposal
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._schema import tenant_key as k
from agora_cli.store._sealing import (
    SEALED_COLUMNS,
    SEALED_PREFIX,
    Sealer,
    is_sealed,
    open_columns,
    sealer_for,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["open_claims", "open_proposals", "seal_results"]

_COLUMNS = SEALED_COLUMNS[p.name]
_INPUT = attrgetter("input")


def open_proposals(conn: Connection, rows: Sequence[Proposal]) -> list[Proposal]:
    """The proposals with ``input``, ``card`` and ``result`` opened (or a marker in place) and
    their ``seal_state`` set; as they are when nothing is sealed."""
    if not any(is_sealed(getattr(r, c)) for r in rows for c in _COLUMNS):
        return list(rows)
    cells = [{"id": r.id, **{c: getattr(r, c) for c in _COLUMNS}} for r in rows]
    opened = open_columns(conn, p.name, cells, [r.tenant_ref for r in rows])
    return [
        replace(r, **{c: values[c] for c in _COLUMNS}, seal_state=state)
        for r, (values, state) in zip(rows, opened, strict=True)
    ]


def open_claims(conn: Connection, claims: Sequence[ClaimResult]) -> list[ClaimResult]:
    """The claims with their work's ``input`` opened: the worker runs the plaintext when it holds
    the KEK, and gets ``SEALED_MARKER`` otherwise."""
    works = [c.work for c in claims if c.work is not None]
    # Where no input holds the sealed form's prefix anywhere, none begins with it: one search
    # in C for a batch, not ``is_sealed`` asked a hundred times (``input`` is never NULL)
    if SEALED_PREFIX not in "\n".join(map(_INPUT, works)) or not any(
        is_sealed(w.input) for w in works
    ):
        return list(claims)
    cells = [{"id": w.id, "input": w.input} for w in works]
    opened = iter(open_columns(conn, p.name, cells, [w.tenant_ref for w in works]))
    out = []
    for c in claims:
        if c.work is None:
            out.append(c)
            continue
        values, _ = next(opened)
        out.append(replace(c, work=replace(c.work, input=values["input"])))
    return out


def open_claim(conn: Connection, claim: ClaimResult) -> ClaimResult:
    """``open_claims`` of one claim (a worker's usual case: its input is plaintext)."""
    if claim.work is None or not is_sealed(claim.work.input):
        return claim
    return open_claims(conn, [claim])[0]


def seal_results(conn: Connection, results: Sequence[tuple[str, str | None]]) -> list[str | None]:
    """Each ``(proposal id, result text)`` about to be settled, sealed when the proposal's tenant
    has a key (``KeyUnavailable`` without the KEK: a result is never written in plaintext for a
    keyed tenant). One read of the proposals' tenants; none when there is no result."""
    wanted = sorted({pid for pid, text in results if text is not None})
    if not wanted:
        return [text for _, text in results]
    # whether the tenant ever had a key, in the same read: a worker settling an unkeyed
    # tenant's jobs pays this one query and no key lookup
    keyed = exists().where(k.c.tenant_key == p.c.tenant_ref)
    q = select(p.c.id, p.c.tenant_ref, keyed).where(p.c.id.in_(wanted))
    found = conn.execute(q).all()
    tenants: dict[str, str | None] = {i: t for i, t, _ in found}
    sealers: dict[str | None, Sealer | None] = {t: None for _, t, has in found if not has}
    out: list[str | None] = []
    for pid, text in results:
        tenant = tenants.get(pid)
        if text is None or pid not in tenants:
            out.append(text)  # a proposal that is not there settles nothing: its lease is lost
            continue
        if tenant not in sealers:
            sealers[tenant] = sealer_for(conn, tenant)
        sealer = sealers[tenant]
        out.append(text if sealer is None else sealer.seal(p.name, "result", pid, text))
    return out
