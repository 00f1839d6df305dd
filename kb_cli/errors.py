"""Errors the tool reports to its user: each carries its exit code and stable code string.

Every error class of the tool lives here, the worker's control flow at the end; the
failure codes of a task are a separate vocabulary (kb_cli.lifecycle.ErrorCode).
"""

from __future__ import annotations

from typing import Any


class KbError(Exception):
    """An expected failure, reported without a traceback."""

    exit_code = 1
    code = "internal_error"
    # A refused command is an audit event (docs/access.md, "Users, roles and the audit trail").
    is_refusal = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class InternalError(KbError):
    """An unexpected failure of the tool itself."""


class DatabaseUnavailable(InternalError):
    """The database server cannot be reached, or the connection to it was lost."""


class ClaimStranded(DatabaseUnavailable):
    """The database server was lost in the middle of a task: nothing more can be
    written, and the task stays claimed until its lease runs out."""

    def __init__(self, message: str, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class SchemaError(KbError):
    """The database schema does not match this version of kb."""

    exit_code = 1
    code = "internal_error"


class UsageError(KbError):
    """Bad options or arguments."""

    exit_code = 2
    code = "usage"


class NotFoundError(KbError):
    """No document or task with that id."""

    exit_code = 3
    code = "not_found"


class NoKnowledgeBaseYet(UsageError):
    """A command that puts nothing in a knowledge base found none where it looked, and
    created none: usage (exit 2), like any path that does not exist. `where` names the
    home (or the database) it looked in."""

    def __init__(
        self, where: str, choose: str = "--home DIR or KB_HOME", base: str | None = None
    ) -> None:
        self.where, self.choose = where, choose
        made = (
            f"`kb base create {base}` creates a new one with that base"
            if base
            else "`kb upload FILE` creates a new one"
        )
        super().__init__(
            f"no knowledge base in {where}: run kb where you created one, or choose it "
            f"with {choose}; {made}"
        )


class IdTooLong(NotFoundError):
    """An id longer than any id can be: refused before it reaches SQL, and audited."""

    is_refusal = True


class ConflictError(KbError):
    """The state machine forbids this transition now."""

    exit_code = 4
    code = "conflict"
    is_refusal = True


class ProblemsFound(ConflictError):
    """`kb doctor` found broken invariants."""

    is_refusal = False


class RepairRefused(ConflictError):
    """`kb doctor --repair` will not move objects of a store it cannot prove is its own."""

    is_refusal = False


class QualityBelowThreshold(ConflictError):
    """`kb eval` scored below --min-hit-rate, or a forbidden document was returned."""

    is_refusal = False


class ForbiddenError(KbError):
    """The caller's role does not allow this command."""

    exit_code = 5
    code = "forbidden"


class TokenMissing(ForbiddenError):
    """Users exist and the caller gave no token: forbidden (exit 5) to a command, 401 to
    an HTTP request (kb serve), which can then send one."""


class CallerRevoked(ForbiddenError):
    """A long-running command's caller was disabled, or its token replaced, since the
    command started: it stops at its next wake-up, the refusal recorded."""

    is_refusal = True


class AlreadyExists(ConflictError):
    """A unique index of the database refused a row: another command made it first
    (for documents: one per base and metadata `path`)."""


class InvalidInputError(KbError):
    """Unsupported, unreadable or oversized input."""

    exit_code = 6
    code = "invalid_input"


class SyncIncomplete(InvalidInputError):
    """`kb sync` went through every path, and some failed (their records say why)."""


class ObjectTooLarge(InvalidInputError):
    """The file is larger than the upload limit."""


class BusyError(KbError):
    """The database stayed locked past the busy timeout; safe to run again."""

    exit_code = 7
    code = "busy"


class TaskUnsuccessful(KbError):
    """`kb status --wait`: the awaited task ended failed or cancelled."""

    exit_code = 8
    code = "task_unsuccessful"


class WaitTimeout(BusyError):
    """`status --wait`: the task did not end before the timeout; safe to wait again.
    Carries the task's current record, which is printed all the same."""

    def __init__(self, record: Any) -> None:
        super().__init__(
            f"timed out waiting for task {record.task_id}: still {record.status}; safe to run again"
        )
        self.record = record


class StorageUnavailable(KbError):
    """The database or the object store cannot be written now (no space left, read-only).

    The message names the cause and the next step. Exit 1 as the contract has no code of
    its own for it; a worker's task waits and retries with `storage_unavailable`."""


class StoreWriteError(StorageUnavailable):
    """The object store could not be written (full disk, read-only, permissions)."""


class ObjectStoreUnreachable(StorageUnavailable):
    """The S3-compatible object store could not be reached, timed out, failed (5xx) or
    asked to slow down: it may recover, so a task waits and retries."""


class ObjectStoreMisconfigured(UsageError):
    """The S3-compatible object store refused the configuration: bad credentials, a
    missing bucket, a wrong region. The message names the variable to fix; it passes
    only by changing it, so a task fails for good."""


class UploadInterrupted(KbError):
    """interrupted: nothing was stored (an upload stores every file or none); run it again"""

    exit_code = 130
    code = "interrupted"


class WrongObjectStore(UsageError):
    """The object store given is not the one this knowledge base's objects are in."""


class DocumentTooLarge(KbError):
    """A document exceeds a configured parsing limit; the message names the limit."""

    exit_code = 6
    code = "invalid_input"


class ProviderUnavailable(KbError):
    """The embedding provider could not be reached, timed out, or refused for load."""

    code = "provider_unavailable"


class ProviderRejected(KbError):
    """The embedding provider refused the request as misconfigured (model, key, input)."""


class ParseError(Exception):
    """The file could not be parsed (damaged, encrypted, not what its name says); the
    worker records it as the task's parse_error."""


class UnreadableScan(ParseError):
    """A scanned page OCR cannot read (an image that does not decode): no other PDF
    backend would find its text either."""


class ScannedWithoutOcr(Exception):
    """Every page with content is an image and OCR is not installed or is off; the
    worker records it as empty_document, with the message saying what to do."""


class EntryUnreadable(Exception):
    """A file of a sync's source cannot be read as it was listed (it changed kind or
    identity, grew past the limit, is gone): one path's record, never the sync's end."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


class OutputClosed(Exception):
    """The reader of stdout went away (`kb status --json | head -1`): not kb's failure."""


# --- the worker's control flow: how a run of a task ends early --------------------------
# Never shown to a user as such: the worker turns each into the task's next state.


class WorkerInterrupt(Exception):
    """Control flow out of a running task; never reported as the task's error."""


class StopRequested(WorkerInterrupt):
    """SIGINT/SIGTERM: release the task at this safe point."""


class ClaimLost(WorkerInterrupt):
    """The task was cancelled or reclaimed: write nothing more."""


class ModelChanged(WorkerInterrupt):
    """The document's base took another embedding model while the task embedded with
    the one before: release the task, to be embedded again with the new one."""


class TaskFailure(Exception):
    """A stage failed with one of the task error codes (docs/interface.md, "Error codes of
    a failed task")."""

    def __init__(self, code: Any, detail: str) -> None:
        super().__init__(detail)
        self.code = code  # a kb_cli.lifecycle.ErrorCode
        self.detail = detail


# --- a user disabled while its worker runs ----------------------------------------------


class UserDisabled(ForbiddenError):
    """A running worker's user was disabled: its task was released, and it stops. A
    refusal, so the error boundary records it in the audit trail."""

    is_refusal = True


class ActorDisabled(WorkerInterrupt):
    """The worker's user was disabled: release the task at this safe point and stop."""
