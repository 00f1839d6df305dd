"""How a worker process is told to stop: the first SIGINT/SIGTERM asks for a stop at
the next safe point (the task is released, nothing half-written); a second one exits at
once.

The handler itself takes no lock. Python runs a handler in the main thread between two
bytecodes, possibly inside `stop.wait()` while that holds the event's own lock: a
`stop.set()` there waits for itself forever (a relay hung so, stopped by Ctrl-C while
idle). So the handler only writes the signal's number to a pipe; a thread of its own
reads it, sets `stop` and tells `told`."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

BLOCK_ENDED = 0  # no signal has this number


@contextmanager
def stop_on_signals(stop: threading.Event, told: Callable[[str], None]) -> Iterator[None]:
    """Within the block: set `stop` on the first SIGINT/SIGTERM and tell `told` the
    signal's name; exit at once on the second. The handlers before are put back after."""
    read_end, write_end = os.pipe()
    signalled = False

    def handle(signum: int, _frame: object) -> None:
        nonlocal signalled
        if signalled:
            os._exit(128 + signum)
        signalled = True
        os.write(write_end, bytes([signum]))

    def pass_on() -> None:
        number = os.read(read_end, 1)[0]
        if number != BLOCK_ENDED:
            # Told first: the main thread, once it sees the stop, releases its task and
            # ends its live display, and nothing may be written above that afterwards.
            told(signal.Signals(number).name)
            stop.set()

    thread = threading.Thread(target=pass_on, name="kb-signals", daemon=True)
    thread.start()
    previous = {name: signal.signal(name, handle) for name in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(name, handler)
        # Said with a byte, not by closing the pipe: a parse server forked within the
        # block holds its own copy of the write end, and the read would never end.
        os.write(write_end, bytes([BLOCK_ENDED]))
        thread.join()
        os.close(read_end)
        os.close(write_end)
