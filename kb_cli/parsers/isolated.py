"""Run PDF and DOCX parsers in a child process that kb can limit and stop.

A library call (pdfium inflating a stream, lxml building a tree) cannot be
interrupted or bounded from inside. So the parsers run in a parse server: a child
forked once (after the parser libraries are imported, usually before the embedding
model is loaded, so it is small), under an address-space limit (RLIMIT_AS: its size
plus the memory limit). It parses one document per request and sends progress and
the blocks back through a pipe. The parent calls the caller's checkpoint every 0.1 s
while it waits: a stop, a cancel or the deadline kills the server, and the next
document gets a new one. So does a server that ran out of memory or grew past half
its limit. Forking per document instead cost 13-16 ms of a tiny document's ~70 ms in
a worker with the model loaded; a request to the running server costs well under one.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import select
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kb_cli.errors import DocumentTooLarge, ParseError, ScannedWithoutOcr, UnreadableScan
from kb_cli.parsers.common import Block, Budget, ParseLimits, ProgressCallback

_HEADER = struct.Struct("!Q")
_POLL_SECONDS = 0.1


@dataclass
class _Server:
    pid: int
    requests: int  # the parent writes here
    replies: int  # and reads here
    memory: int  # the limit it runs under
    ocr_memory: int  # the limit it may raise itself to while OCR reads a page
    owner: int  # the process that forked it


# Raised by kb's checks, never a library's way of saying memory ran out.
_OWN_ERRORS = (DocumentTooLarge, ScannedWithoutOcr, UnreadableScan)

_server: _Server | None = None
_one_at_a_time = threading.Lock()  # one server, one request at a time per process


def run(
    module: ModuleType,
    path: Path,
    on_progress: ProgressCallback,
    budget: Budget,
    checkpoint: Callable[[], None],
) -> list[Block]:
    module.preload()
    with _one_at_a_time:
        server = _running_server(budget.limits.max_memory_bytes, _ocr_memory(budget.limits))
        _send(server.requests, (module.__name__, str(path), budget.limits))
        try:
            reply = _collect(server, on_progress, budget.limits, checkpoint)
        except BaseException:
            _stop_server()  # interrupted mid-parse, past its deadline, or dead
            raise
        *answer, keep = reply
        if not keep:
            _stop_server()
        if answer[0] == "done":
            blocks: list[Block] = answer[1]
            return blocks
        raise _rebuild(tuple(answer), budget.limits)


def _ocr_memory(limits: ParseLimits) -> int:
    """The hard limit of the server: OCR's, when OCR may run (parsers/ocr.py)."""
    from kb_cli.parsers import ocr

    if limits.ocr == "off" or not ocr.available():
        return limits.max_memory_bytes
    return max(limits.max_memory_bytes, limits.ocr_max_memory_bytes)


def _running_server(memory: int, ocr_memory: int) -> _Server:
    global _server
    if _server is not None and _server.owner != os.getpid():
        _server = None  # inherited through a fork: that server is our parent's
    if _server is not None and (_server.memory, _server.ocr_memory) != (memory, ocr_memory):
        _stop_server()
    if _server is None:
        _server = _spawn(memory, ocr_memory)
    return _server


def _spawn(memory: int, ocr_memory: int) -> _Server:
    to_child, requests = os.pipe()
    replies, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server: never returns
        os.close(requests)
        os.close(replies)
        _serve(to_child, from_child, memory, ocr_memory)
    os.close(to_child)
    os.close(from_child)
    return _Server(pid, requests, replies, memory, ocr_memory, os.getpid())


def _stop_server() -> None:
    global _server
    server, _server = _server, None
    if server is None:
        return
    for fd in (server.requests, server.replies):
        os.close(fd)
    if server.pid:  # not reaped yet
        os.kill(server.pid, signal.SIGKILL)
        os.waitpid(server.pid, 0)


# --- the server ---------------------------------------------------------------------


def _serve(requests: int, replies: int, memory: int, ocr_memory: int) -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        base = _address_space("VmSize")
        if base is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (base + memory, base + ocr_memory))
        while (request := _receive(requests)) is not None:
            reply = _parse_request(request, replies, base, memory)
            # A server that loaded the OCR model retires: the next document gets the
            # smaller limit again, and the model's memory back.
            keep = reply[0] != "memory" and not _grown(base, memory) and not _read_scans()
            _send(replies, (*reply, keep))
            if not keep:
                break
    finally:
        os._exit(0)


def _parse_request(
    request: tuple[Any, ...], replies: int, base: int | None, memory: int
) -> tuple[Any, ...]:
    name, path, limits = request
    module = importlib.import_module(name)
    progress = lambda done, total: _send(replies, ("progress", done, total))  # noqa: E731
    try:
        return ("done", module.parse(Path(path), progress, Budget(limits)))
    except MemoryError:
        return ("memory",)
    except _OWN_ERRORS as error:  # said by kb's own code, whatever the memory it took
        return ("error", *_portable(error))
    except BaseException as error:
        return ("memory",) if _grown(base, memory) else ("error", *_portable(error))


def _grown(base: int | None, memory: int) -> bool:
    """Whether the server's address space has ever grown past half its limit (the
    larger one once OCR raised it): then a parser's error is its way of saying memory
    ran out (lxml says "unknown error"), and the server retires so that the next
    document has the whole limit."""
    peak = _address_space("VmPeak")
    if _read_scans():
        import resource

        memory = resource.getrlimit(resource.RLIMIT_AS)[0] - (base or 0)
    return base is not None and peak is not None and peak - base > memory // 2


def _read_scans() -> bool:
    import sys

    ocr = sys.modules.get("kb_cli.parsers.ocr")
    return ocr is not None and ocr.engine_loaded()


def _address_space(field: str) -> int | None:
    """This process's virtual size (VmSize) or its peak (VmPeak) in bytes, from Linux's
    /proc; None where there is no such file."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    return None


def _portable(error: BaseException) -> tuple[Any, ...]:
    """What the parent needs to rebuild the error: its kind, type name and message."""
    if isinstance(error, DocumentTooLarge):
        return "too_large", type(error).__name__, error.message, None
    if isinstance(error, ScannedWithoutOcr):
        return "scanned", type(error).__name__, str(error), None
    if isinstance(error, UnreadableScan):
        return "unreadable_scan", type(error).__name__, str(error), None
    if isinstance(error, ParseError):
        return "parse", type(error).__name__, str(error), None
    if isinstance(error, OSError):
        return "os", type(error).__name__, error.strerror or "", error.errno
    return "other", type(error).__name__, " ".join(str(error).split())[:400], None


def _receive(fd: int) -> tuple[Any, ...] | None:
    """One whole message, blocking; None at the end of the pipe."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    payload = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if payload is None else pickle.loads(payload)


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _send(out: int, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(out, view) :]


# --- the parent ---------------------------------------------------------------------


def _collect(
    server: _Server,
    on_progress: ProgressCallback,
    limits: ParseLimits,
    checkpoint: Callable[[], None],
) -> tuple[Any, ...]:
    """Progress as it comes, until the server's final reply for this document."""
    deadline = time.monotonic() + limits.timeout_seconds
    buffer = bytearray()
    while True:
        checkpoint()
        if time.monotonic() > deadline:
            raise DocumentTooLarge(
                f"parsing took longer than {limits.timeout_seconds:g} s (KB_PARSE_TIMEOUT)"
            )
        if not select.select([server.replies], [], [], _POLL_SECONDS)[0]:
            continue
        data = os.read(server.replies, 1 << 20)
        if not data:
            raise _died(server, limits)
        buffer += data
        for message in _messages(buffer):
            if message[0] != "progress":
                return message
            on_progress(message[1], message[2])


def _messages(buffer: bytearray) -> Iterator[tuple[Any, ...]]:
    """Complete messages at the front of `buffer`, removed from it as they are read."""
    while len(buffer) >= _HEADER.size:
        (length,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + length:
            return
        message: tuple[Any, ...] = pickle.loads(buffer[_HEADER.size : _HEADER.size + length])
        del buffer[: _HEADER.size + length]
        yield message


def _memory_error(limits: ParseLimits, crashed: str = "") -> DocumentTooLarge:
    ocr = _ocr_memory(limits)
    while_ocr = (
        f", or {ocr // 2**20} MiB while OCR reads a page (KB_OCR_MAX_MEMORY_MB)"
        if ocr > limits.max_memory_bytes
        else ""
    )
    return DocumentTooLarge(
        f"parsing needed more than the memory limit of {limits.max_memory_bytes // 2**20} MiB "
        f"(KB_PARSE_MAX_MEMORY_MB){while_ocr}{crashed}"
    )


def _rebuild(message: tuple[Any, ...], limits: ParseLimits) -> Exception:
    if message[0] == "memory":
        return _memory_error(limits)
    _, kind, name, text, number = message
    if kind == "too_large":
        return DocumentTooLarge(text)
    if kind == "parse":
        return ParseError(text)
    if kind == "scanned":
        return ScannedWithoutOcr(text)
    if kind == "unreadable_scan":
        return UnreadableScan(text)
    if kind == "os":
        return OSError(number, text)
    return ParseError(f"{name}: {text}" if text else name)


def _died(server: _Server, limits: ParseLimits) -> Exception:
    """The server ended without a word: killed by a signal (an allocation past its
    limit aborts native code) or gone some other way."""
    _, status = os.waitpid(server.pid, 0)
    server.pid = 0  # reaped: its number may belong to another process by now
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return _memory_error(limits, f", or its parser crashed ({name})")
    return ParseError("the parser process ended without an answer")
