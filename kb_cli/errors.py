"""Errors the tool reports to its user: each carries its exit code and stable code string."""


class KbError(Exception):
    """An expected failure, reported without a traceback."""

    exit_code = 1
    code = "internal_error"
    # A refused command is an audit event (contract section 5, `history`).
    is_refusal = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class InternalError(KbError):
    """An unexpected failure of the tool itself."""


class UsageError(KbError):
    """Bad options or arguments."""

    exit_code = 2
    code = "usage"


class NotFoundError(KbError):
    """No document or task with that id."""

    exit_code = 3
    code = "not_found"


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


class InvalidInputError(KbError):
    """Unsupported, unreadable or oversized input."""

    exit_code = 6
    code = "invalid_input"


class BusyError(KbError):
    """The database stayed locked past the busy timeout; safe to run again."""

    exit_code = 7
    code = "busy"


class StorageUnavailable(KbError):
    """The database or the object store cannot be written now (no space left, read-only).

    The message names the cause and the next step. Exit 1 as the contract has no code of
    its own for it; a worker's task waits and retries with `storage_unavailable`."""


class DocumentTooLarge(KbError):
    """A document exceeds a configured parsing limit; the message names the limit."""

    exit_code = 6
    code = "invalid_input"


class ProviderUnavailable(KbError):
    """The embedding provider could not be reached, timed out, or refused for load."""

    code = "provider_unavailable"


class ProviderRejected(KbError):
    """The embedding provider refused the request as misconfigured (model, key, input)."""
