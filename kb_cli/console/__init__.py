"""Everything the user sees: JSON Lines, plain lines, or rich tables and live progress.

Rich is used only when the stream is a terminal and neither CI=true nor NO_COLOR is
set; otherwise output is plain lines with no escape codes, for scripts and logs.

The renderers sit beside the records they draw: `core` (lines, JSON, the terminal check),
`renderers` (`print_records` and the table of renderers it dispatches through, above
the others), `tasks` (tasks and documents), `answers` (search hits, eval),
`history` (the audit trail), `stages`, `workers` and `waiting` (live progress of `kb
work` and `kb status --wait`), `demo`, and `admin` (doctor, users, bases, upgrade,
reindex). Callers use the names re-exported here: `console.print_records(...)`.
"""

from kb_cli.console.admin import (
    Progress,
    print_bases,
    print_doctor,
    print_new_user,
    print_reindex,
    print_switch,
    print_upgrade,
    print_users,
    print_vector_index,
)
from kb_cli.console.answers import print_eval, print_search, search_line
from kb_cli.console.core import (
    PLAIN_PROGRESS_INTERVAL,
    OutputClosed,
    can_ask,
    cell_len_of,
    emit,
    is_fancy,
    log,
    note,
    report_error,
    short,
    stopping,
    visible,
    warn,
    write_json,
)
from kb_cli.console.demo import DemoLog, print_demo_summary
from kb_cli.console.events import RelayLog, event_line, print_event
from kb_cli.console.history import audit_line
from kb_cli.console.reading import print_chunks, print_diff, print_exports, print_revision
from kb_cli.console.renderers import print_records
from kb_cli.console.stages import STAGES, LiveStages
from kb_cli.console.sync import (
    SyncDisplay,
    confirm_missing,
    confirm_reparse,
    print_reparse,
)
from kb_cli.console.tasks import (
    WIDE,
    confirm_deletion,
    document_line,
    note_skipped,
    print_deletions,
    print_document_table,
    task_line,
    warn_duplicates,
)
from kb_cli.console.waiting import NO_WORKER_HINT, NO_WORKER_HINT_SECONDS, LiveWait, WaitHint
from kb_cli.console.workers import LiveWorkerDisplay, PlainWorkerLog, print_drafts_waiting

__all__ = [
    "NO_WORKER_HINT",
    "NO_WORKER_HINT_SECONDS",
    "PLAIN_PROGRESS_INTERVAL",
    "STAGES",
    "WIDE",
    "DemoLog",
    "LiveStages",
    "LiveWait",
    "LiveWorkerDisplay",
    "OutputClosed",
    "PlainWorkerLog",
    "Progress",
    "RelayLog",
    "SyncDisplay",
    "WaitHint",
    "audit_line",
    "can_ask",
    "cell_len_of",
    "confirm_deletion",
    "confirm_missing",
    "confirm_reparse",
    "document_line",
    "emit",
    "event_line",
    "is_fancy",
    "log",
    "note",
    "note_skipped",
    "print_bases",
    "print_chunks",
    "print_deletions",
    "print_demo_summary",
    "print_diff",
    "print_doctor",
    "print_document_table",
    "print_drafts_waiting",
    "print_eval",
    "print_event",
    "print_exports",
    "print_new_user",
    "print_records",
    "print_reindex",
    "print_reparse",
    "print_revision",
    "print_search",
    "print_switch",
    "print_upgrade",
    "print_users",
    "print_vector_index",
    "report_error",
    "search_line",
    "short",
    "stopping",
    "task_line",
    "visible",
    "warn",
    "warn_duplicates",
    "write_json",
]
