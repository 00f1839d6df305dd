"""Whether and when a failed attempt is tried again: a pure decision, persisted
elsewhere (kb_cli.worker.claim)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kb_cli.lifecycle import TRANSIENT_ERRORS, ErrorCode

BACKOFF_CAP_SECONDS = 3600.0


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_seconds: float
    cap_seconds: float = BACKOFF_CAP_SECONDS

    def decide(
        self, code: ErrorCode, attempt: int, now: datetime, jitter: float = 1.0
    ) -> datetime | None:
        """When attempt number `attempt` (1-based) that failed with `code` is tried again,
        or None when the task fails for good: the cause will not pass by itself, or the
        attempts are used up. The delay doubles with each attempt, up to the cap; the
        caller draws `jitter` (0.5-1.5), so that a burst of failures does not come back
        as a burst."""
        if code not in TRANSIENT_ERRORS or attempt >= self.max_attempts:
            return None
        delay = min(self.cap_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return now + timedelta(seconds=delay * jitter)
