"""Renews the lease of the running claim in the background, so that one long page
cannot let it lapse. One thread per worker, started at its first task."""

from __future__ import annotations

import threading
from typing import Protocol

from kb_cli.errors import KbError


class Renewable(Protocol):
    def renew_lease(self) -> None: ...


class Heartbeat:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._claim: Renewable | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, claim: Renewable | None) -> None:
        self._claim = claim
        if claim is not None and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="kb-heartbeat", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self.interval):
            claim = self._claim
            if claim is None:
                continue
            try:
                claim.renew_lease()
            except KbError:
                continue  # try again at the next beat; the lease has slack for it
