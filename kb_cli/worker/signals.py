"""How a worker process is told to stop: the first SIGINT/SIGTERM asks for a stop at
the next safe point (the task is released, nothing half-written); a second one exits at
once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable


def stop_on_signals(stop: threading.Event, told: Callable[[str], None]) -> None:
    """Set `stop` on the first SIGINT/SIGTERM, and tell `told` the signal's name."""

    def handle(signum: int, _frame: object) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()
        told(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
