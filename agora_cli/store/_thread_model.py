"""The values the thread store returns: threads, messages, tool calls, runs, usage rows and
transcripts, as frozen dataclasses (no SQL)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agora_cli.store._vocabulary import RUN_STATUSES

__all__ = [
    "RUN_TERMINAL_STATUSES",
    "Message",
    "Run",
    "RunEnd",
    "Thread",
    "ThreadDeletion",
    "ThreadSummary",
    "ThreadTurn",
    "ThreadUsageRow",
    "ThreadUsageTotals",
    "ToolCall",
    "Transcript",
    "TranscriptMessage",
    "TruncateResult",
    "TurnMessage",
]


RUN_TERMINAL_STATUSES = RUN_STATUSES[1:]  # completed, failed, cancelled


@dataclass(frozen=True)
class Thread:
    """One row of ``agent_thread``."""

    id: str
    actor_ref: str
    tenant_ref: str | None
    title: str
    persona: str
    model: str | None
    default_agent: str | None
    transient: bool
    pinned_at: int | None
    summary: str | None
    summary_message_count: int
    active_stream_id: str | None
    created_at: int
    updated_at: int
    deleted_at: int | None
    # how its sealed columns (title, summary) read: "plain", "opened", "locked", "broken",
    # "shredded" (the worst of the two; a marker stands in for a value that does not open)
    seal_state: str = "plain"


@dataclass(frozen=True)
class Message:
    """One row of ``agent_message`` (JSON columns as the stored text)."""

    id: str
    thread_id: str
    seq: int
    role: str
    content: str
    tool_calls: str | None
    tool_results: str | None
    attachments: str | None
    follow_ups: str | None
    usage: str | None
    persona: str | None
    run_id: str | None
    outcome: str | None
    created_at: int
    # stored sealed (its sealed columns are then the opened text, or a marker in their place)
    sealed: bool = False
    # "plain", "opened", "locked" (no KEK), "broken" (a value does not open where it is
    # stored: SEAL_BROKEN_MARKER in its place) or "shredded" (its key was destroyed)
    seal_state: str = "plain"

    @property
    def seal_broken(self) -> bool:
        return self.seal_state == "broken"


@dataclass(frozen=True)
class TurnMessage:
    """A message as a turn reads it: what goes back to the model, nothing else."""

    id: str
    seq: int
    role: str
    content: str
    tool_calls: str | None
    tool_results: str | None
    attachments: str | None
    persona: str | None
    created_at: int


@dataclass(frozen=True)
class ThreadTurn:
    """What ``load_thread_for_turn`` returns: the thread and its newest messages in order."""

    thread: Thread
    messages: list[TurnMessage]


@dataclass(frozen=True)
class ToolCall:
    """One row of ``agent_tool_call``."""

    id: str
    message_id: str
    tool_name: str
    tool_type: str
    input: str | None
    output: str | None
    status: str
    executed_by_ref: str | None
    execution_ms: int | None
    error: str | None
    run_id: str | None
    created_at: int
    executed_at: int | None
    # how input and output read: "plain", "opened", "locked", "broken" or "shredded"
    seal_state: str = "plain"

    @property
    def latency_ms(self) -> int | None:
        """``execution_ms``, else ``executed_at − created_at`` (the runtime records no duration;
        for an approved action it includes the wait); ``None`` for a call not settled."""
        if self.execution_ms is not None:
            return int(self.execution_ms)
        if self.executed_at is None:
            return None
        return max(0, int(self.executed_at) - int(self.created_at))


@dataclass(frozen=True)
class Run:
    """One row of ``agent_run``."""

    id: str
    thread_id: str
    agent_name: str | None
    actor_ref: str
    tenant_ref: str | None
    status: str
    started_at: int
    finished_at: int | None
    step_count: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    error: str | None
    durable: bool


@dataclass(frozen=True)
class RunEnd:
    """The outcome of ``end_run``: ``ended`` is False when another terminal status came first."""

    ended: bool
    run: Run


@dataclass(frozen=True)
class ThreadUsageRow:
    """One ledger row of a thread, as the transcript shows it."""

    id: str
    message_id: str | None
    run_id: str | None
    model_id: str
    purpose: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    cost_usd: float | None
    cost_source: str | None
    created_at: int


@dataclass(frozen=True)
class TranscriptMessage:
    """A message with its tool-call records and the ledger rows that name it."""

    message: Message
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: list[ThreadUsageRow] = field(default_factory=list)


@dataclass(frozen=True)
class Transcript:
    """A whole thread in order (``created_at``, ``seq``, ``id``); ``other_usage`` holds ledger
    rows tied to no message."""

    thread: Thread
    messages: list[TranscriptMessage]
    other_usage: list[ThreadUsageRow]


@dataclass(frozen=True)
class ThreadUsageTotals:
    """A thread's ledger rows summed: ``cost_usd`` sums the known costs (``None`` when no row has
    one) and ``unpriced_turns`` counts the rows without a cost, never summed as free."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    unpriced_turns: int = 0


@dataclass(frozen=True)
class ThreadSummary:
    """A thread as ``threads list`` shows it: soft-deleted and transient marks, ledger totals."""

    id: str
    actor_ref: str
    tenant_ref: str | None
    title: str
    messages: int
    updated_at: int
    deleted_at: int | None = None
    transient: bool = False
    usage: ThreadUsageTotals = field(default_factory=ThreadUsageTotals)


@dataclass(frozen=True)
class TruncateResult:
    """What ``truncate_from`` removed."""

    messages_deleted: int
    tool_calls_deleted: int
    summary_cleared: bool


@dataclass(frozen=True)
class ThreadDeletion:
    """What ``delete_thread`` removed, as rows per table name (``agent_message``: N, …), and the
    ledger rows that went with the thread, summed (their spend leaves every report)."""

    id: str
    deleted: dict[str, int]
    ledger: ThreadUsageTotals = field(default_factory=ThreadUsageTotals)
