"""Renews the leases of the running claim (and of the claims waiting behind it) in the
background, so that one long page cannot let them lapse. One thread per worker,
started at its first task."""

from __future__ import annotations

import threading
from typing import Protocol

from kb_cli.errors import KbError


class Renewable(Protocol):
    def renew_lease(self) -> None: ...


class Heartbeat:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._claims: tuple[Renewable, ...] = ()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, *claims: Renewable | None) -> None:
        """Renew these claims from now on (the running one, and those claimed with it
        that wait for their turn); none: renew nothing."""
        self._claims = tuple(claim for claim in claims if claim is not None)
        if self._claims and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="kb-heartbeat", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self.interval):
            for claim in self._claims:
                try:
                    claim.renew_lease()
                except KbError:
                    continue  # try again at the next beat; the lease has slack for it
