"""What ``db check`` reports: one ``Problem`` per difference from the expected schema.

A leaf module (it imports nothing of agora's): provisioning, the Galera checks and the
row-level-security checks each build ``Problem`` values, and import them from here rather than
from one another.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass(frozen=True)
class Problem:
    """One difference between the live schema and the expected one."""

    kind: str
    table: str
    detail: str
