"""`agora demo`: provision a database and fill it with a realistic sample data set."""

from __future__ import annotations


def demo() -> None:
    """Write a reproducible sample data set (not built yet)."""
