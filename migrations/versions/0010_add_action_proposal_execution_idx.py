"""Index approved work by execution state and tool (agent_action_proposal_execution_idx).

``agora metrics`` counts failed executions by tool on every collection: with this index that is
a range of the failed rows, where the discovery index's ``done`` range (every finished proposal)
grows with history (issue 30; tests/bench/RESULTS.md, "Metrics").

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "the execution index")
