"""`agora spend` and `agora quota`: the ledger reports."""

from __future__ import annotations


def spend() -> None:
    """Show spend and token use, grouped, over a window (not built yet)."""


def quota() -> None:
    """Show an actor's day and month quota windows (not built yet)."""
