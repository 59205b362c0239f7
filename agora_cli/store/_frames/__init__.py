"""The SQL token sink: a run's stream frames as rows of ``agent_stream_frame`` (frames.md).

With several replicas and no Redis, a running turn streams its frames through the application's
own database, and any replica can serve and resume any run's stream.

Frames are JSON objects with a ``type``; the names follow the AI SDK's UI message stream:

====================================  ==================================  =====================
type                                  fields besides ``type``             coalesced
====================================  ==================================  =====================
``text-delta``                        ``delta``, ``id``?                  yes
``reasoning-delta``                   ``delta``, ``id``?                  yes
``tool-input-delta``                  ``tool_call_id``, ``delta``         yes, per tool call
``text-start`` / ``text-end``         ``id``?                             no
``reasoning-start`` / ``-end``        ``id``?                             no
``tool-input-start``                  ``tool_call_id``, ``tool_name``     no
``tool-input-available``              ``tool_call_id``, ``tool_name``,    no
                                      ``input``
``tool-result``                       ``tool_call_id``, ``output``        no
``data-<name>``                       ``data`` (a UI component)           no
``error``                             ``error_text``                      no
``start``, ``finish``,                as the runtime likes                no
``start-step``, ``finish-step``
====================================  ==================================  =====================

Any other ``type`` is stored as it is. The end of a run is not a frame: it is a row whose
``frame`` is NULL (``FrameWriter.end``).

Writer (``FrameWriter``): appends ``(run_id, seq, frame, created_at)`` with ``seq`` gapless from
1, each write its own short transaction, committed, so readers on other replicas see it (the
exception to "the caller owns the transaction"). Consecutive deltas of one kind — text; reasoning;
tool input of one tool call; all other fields equal — written within ``flush_ms`` (default 50)
become one row holding their concatenation; any other frame, ``flush()`` and ``end()`` first
write the gathered delta (in the same transaction), so order is kept. A timer writes a gathered
delta once it is ``flush_ms`` old, so at most ``flush_ms`` of text lives only in the process. A
writer for a run that already has rows continues after its highest ``seq``; the primary key makes
a duplicate ``seq`` impossible (a second live writer for the run gets ``Conflict``).

Reader (``read_frames``, ``follow``): ``follow`` reads the rows past its cursor every ``poll_ms``
(default 250) until the end marker. A reader that attaches late, or after the end, replays from
the first row. Each read also re-reads the last row it already has: when that row is gone or
differs, the run was purged, closed or its numbering started over; the reader then replays from
the run's new first row (a ``seq`` not above the previous one tells a consumer to reset), or ends
when the run has no rows left.

Purge (``purge_expired``): a run's rows lapse ``ttl_s`` (default 3600) after its *last* write.
Candidate runs come from the ``(created_at, run_id)`` index (rows older than the cutoff, walked
with a keyset cursor, so it always terminates, old-but-active runs included); each candidate's
newest row is read through the primary key; runs whose newest row is older than the cutoff are
deleted whole, ``batch`` runs per short transaction. The delete also requires
``created_at < cutoff``, so a row a writer appends during the purge is never deleted. Its cost
follows the rows that aged out, not the size of the table. ``ttl_s=0`` turns expiry off.
``FrameWriter(auto_purge=True)`` (the default) runs it after ``end()``, at most once a minute per
process; cron with ``agora frames purge`` covers the rest.

Costs a user should know: delivery is polled — a frame reaches a reader up to ``poll_ms`` (plus
``flush_ms`` for deltas) after it was produced. A streamed answer is about twenty single-row
inserts (commits) a second per run; each open reader a few small primary-key reads a second
(``1000 / poll_ms``). Fine for tens of concurrent chats on a database that is already there; for
hundreds, use a push transport.

One concern a module: ``reader`` (``read_frames``, ``follow``), ``writer`` (``FrameWriter``) and
``purge`` (``close``, ``purge_expired``, ``frame_stats``); every name keeps its import path,
``agora_cli.store._frames``.
"""

from __future__ import annotations

from agora_cli.store._frames.purge import (
    DEFAULT_FRAME_TTL_S,
    DEFAULT_PURGE_BATCH,
    FrameStats,
    PurgeReport,
    close,
    delete_frames_of_runs,
    frame_stats,
    purge_expired,
)
from agora_cli.store._frames.reader import (
    DEFAULT_POLL_MS,
    StreamFrame,
    find_last_frame,
    follow,
    read_frames,
)
from agora_cli.store._frames.writer import (
    COALESCED_FRAME_TYPES,
    DEFAULT_FLUSH_MS,
    FrameWriter,
)

__all__ = [
    "COALESCED_FRAME_TYPES",
    "DEFAULT_FLUSH_MS",
    "DEFAULT_FRAME_TTL_S",
    "DEFAULT_POLL_MS",
    "DEFAULT_PURGE_BATCH",
    "FrameStats",
    "FrameWriter",
    "PurgeReport",
    "StreamFrame",
    "close",
    "delete_frames_of_runs",
    "find_last_frame",
    "follow",
    "frame_stats",
    "purge_expired",
    "read_frames",
]
