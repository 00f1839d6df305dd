"""Run a PDF or DOCX parser in a child process that kb can limit and stop.

A library call (pdfium inflating a stream, lxml building a tree) cannot be
interrupted or bounded from inside. So the parser runs in a forked child with an
address-space limit (RLIMIT_AS, the child's size at the fork plus the memory limit);
the parent waits on a pipe, renders the progress the child sends, calls the
caller's checkpoint every 0.1 s (a stop or cancel kills the child at once) and kills
it at the deadline. The parser library is imported before the fork, so a child costs
a fork and a pipe, not an import.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kb_cli.errors import DocumentTooLarge
from kb_cli.parsers import Block, Budget, ParseError, ProgressCallback

_HEADER = struct.Struct("!Q")
_POLL_SECONDS = 0.1


def run(
    module: ModuleType,
    path: Path,
    on_progress: ProgressCallback,
    budget: Budget,
    checkpoint: Callable[[], None],
) -> list[Block]:
    module.preload()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(module, path, budget, write_end)
    os.close(write_end)
    try:
        return _collect(pid, read_end, on_progress, budget, checkpoint)
    finally:
        os.close(read_end)
        _reap(pid)


def _child(module: ModuleType, path: Path, budget: Budget, out: int) -> None:
    base = None
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        base = _address_space("VmSize")
        _limit_memory(base, budget.limits.max_memory_bytes)
        blocks = module.parse(
            path, lambda done, total: _send(out, ("progress", done, total)), budget
        )
        _send(out, ("done", blocks))
    except MemoryError:
        _send(out, ("memory",))
    except BaseException as error:
        _send(out, ("memory",) if _ran_out(base, budget) else ("error", *_portable(error)))
    finally:
        os._exit(0)


def _limit_memory(base: int | None, growth: int) -> None:
    import resource

    if base is not None:
        resource.setrlimit(resource.RLIMIT_AS, (base + growth, base + growth))


def _ran_out(base: int | None, budget: Budget) -> bool:
    """Whether a parser's error is its way of saying that memory ran out (lxml says
    "unknown error"): the address space had grown past half the limit by then."""
    peak = _address_space("VmPeak")
    return None not in (base, peak) and peak - base > budget.limits.max_memory_bytes // 2


def _address_space(field: str) -> int | None:
    """This process's virtual size (VmSize) or its peak (VmPeak) in bytes, from Linux's
    /proc; None where there is no such file."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    return None


def _portable(error: BaseException) -> tuple:
    """What the parent needs to rebuild the error: its kind, type name and message."""
    if isinstance(error, DocumentTooLarge):
        return "too_large", type(error).__name__, error.message, None
    if isinstance(error, ParseError):
        return "parse", type(error).__name__, str(error), None
    if isinstance(error, OSError):
        return "os", type(error).__name__, error.strerror or "", error.errno
    return "other", type(error).__name__, " ".join(str(error).split())[:400], None


def _send(out: int, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(out, view) :]


def _collect(
    pid: int,
    fd: int,
    on_progress: ProgressCallback,
    budget: Budget,
    checkpoint: Callable[[], None],
) -> list[Block]:
    limits = budget.limits
    deadline = time.monotonic() + limits.timeout_seconds
    buffer = bytearray()
    while True:
        checkpoint()
        if time.monotonic() > deadline:
            raise DocumentTooLarge(
                f"parsing took longer than {limits.timeout_seconds:g} s (KB_PARSE_TIMEOUT)"
            )
        if not select.select([fd], [], [], _POLL_SECONDS)[0]:
            continue
        data = os.read(fd, 1 << 20)
        if not data:
            raise _died(pid, limits.max_memory_bytes)
        buffer += data
        for message in _messages(buffer):
            if message[0] == "progress":
                on_progress(message[1], message[2])
            elif message[0] == "done":
                return message[1]
            else:
                raise _rebuild(message, limits.max_memory_bytes)


def _messages(buffer: bytearray):
    """Complete messages at the front of `buffer`, removed from it as they are read."""
    while len(buffer) >= _HEADER.size:
        (length,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + length:
            return
        message = pickle.loads(buffer[_HEADER.size : _HEADER.size + length])
        del buffer[: _HEADER.size + length]
        yield message


def _memory_error(limit: int, crashed: str = "") -> DocumentTooLarge:
    return DocumentTooLarge(
        f"parsing needed more than the memory limit of {limit // 2**20} MiB "
        f"(KB_PARSE_MAX_MEMORY_MB){crashed}"
    )


def _rebuild(message: tuple, memory_limit: int) -> Exception:
    if message[0] == "memory":
        return _memory_error(memory_limit)
    _, kind, name, text, number = message
    if kind == "too_large":
        return DocumentTooLarge(text)
    if kind == "parse":
        return ParseError(text)
    if kind == "os":
        return OSError(number, text)
    return ParseError(f"{name}: {text}" if text else name)


def _died(pid: int, memory_limit: int) -> Exception:
    """The child ended without a word: killed by a signal (an allocation past its
    limit aborts native code) or gone some other way."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return _memory_error(memory_limit, f", or its parser crashed ({name})")
    return ParseError(f"the parser process exited with status {os.waitstatus_to_exitcode(status)}")


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, ProcessLookupError):
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
