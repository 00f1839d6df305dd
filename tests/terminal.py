"""`kb` on a pseudo-terminal, as a person sees it: the screen text of a real process."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import kb_env, wait_until

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def terminal_env() -> dict[str, str]:
    env = kb_env(TERM="xterm-256color", COLUMNS="110", LINES="40")
    for name in ("CI", "NO_COLOR"):
        env.pop(name, None)
    return env


def run_in_terminal(
    *args: str,
    timeout: float = 60,
    interrupt_on: str | None = None,
    answer: tuple[str, str] | None = None,
    on_prompt: Callable[[], object] | None = None,
    **env: str,
) -> tuple[int, str]:
    """Run `kb` with stdin, stdout and stderr on a pseudo-terminal; return the screen text.
    A command that runs until stopped gets Ctrl-C a second after `interrupt_on` was drawn;
    `answer` (prompt, reply) types the reply once the prompt was drawn, after calling
    `on_prompt` (to look at what the command has done before it is answered)."""
    leader, follower = pty.openpty()
    env = {**terminal_env(), **env}
    size = struct.pack("HHHH", int(env["LINES"]), int(env["COLUMNS"]), 0, 0)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, size)
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        close_fds=True,
    )
    os.close(follower)
    chunks: list[bytes] = []
    interrupt = {"on": interrupt_on, "at": None}
    pending = [answer] if answer else []

    def screen_ended() -> bool:
        """Read what was drawn for up to 0.1 s; true once the terminal closed or the
        process ended with nothing more to read."""
        if pending and pending[0][0].encode() in b"".join(chunks):
            if on_prompt is not None:
                on_prompt()
            os.write(leader, pending.pop()[1].encode())
        if interrupt["on"] and interrupt["on"].encode() in b"".join(chunks):
            interrupt["on"], interrupt["at"] = None, time.monotonic() + 1.0
        if interrupt["at"] and time.monotonic() >= interrupt["at"]:
            process.send_signal(signal.SIGINT)
            interrupt["at"] = None
        ready, _, _ = select.select([leader], [], [], 0.1)
        if not ready:
            return process.poll() is not None
        try:
            data = os.read(leader, 65536)
        except OSError:
            return True
        chunks.append(data)
        return not data

    try:
        wait_until(
            screen_ended,
            timeout=timeout,
            interval=0,
            message=lambda: (
                f"kb {' '.join(args)} still drawing after {timeout} s: "
                + b"".join(chunks).decode("utf-8", "replace")[-2000:]
            ),
        )
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        os.close(leader)
    code = process.wait(timeout=10)
    return code, b"".join(chunks).decode("utf-8", "replace")


@dataclass
class Streams:
    """What a `kb` process wrote to stdout and to stderr, each a terminal or a pipe (a
    terminal's line ends read as `\\n`), and its exit code."""

    code: int
    stdout: str
    stderr: str


def run_with_streams(
    *args: str,
    stdout_tty: bool,
    stderr_tty: bool,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    interrupt_when: Callable[[str], bool] | None = None,
) -> Streams:
    """Run `kb` with stdout and stderr each on a pseudo-terminal of its own or a pipe
    (two terminals, so that what went where is told apart), stdin from /dev/null (never
    asked anything); SIGINT once `interrupt_when(stdout so far)` holds."""
    env = {**terminal_env(), "COLUMNS": "80", **(env or {})}
    readers: dict[str, int] = {}
    ends: dict[str, int] = {}
    for name, tty in (("stdout", stdout_tty), ("stderr", stderr_tty)):
        if tty:
            leader, follower = pty.openpty()
            size = struct.pack("HHHH", int(env["LINES"]), int(env["COLUMNS"]), 0, 0)
            fcntl.ioctl(follower, termios.TIOCSWINSZ, size)
        else:
            leader, follower = os.pipe()
        readers[name], ends[name] = leader, follower
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=ends["stdout"],
        stderr=ends["stderr"],
        env=env,
        close_fds=True,
    )
    for end in ends.values():
        os.close(end)
    read: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    open_ = dict(readers)
    deadline = time.monotonic() + timeout
    try:
        while open_:
            if time.monotonic() > deadline:
                pytest.fail(f"kb {' '.join(args)} still running after {timeout} s")
            if interrupt_when and interrupt_when(
                b"".join(read["stdout"]).decode("utf-8", "replace")
            ):
                process.send_signal(signal.SIGINT)
                interrupt_when = None
            ready, _, _ = select.select(list(open_.values()), [], [], 0.1)
            for name in [name for name, fd in open_.items() if fd in ready]:
                try:
                    data = os.read(open_[name], 65536)
                except OSError:  # a terminal whose last writer closed it
                    data = b""
                if data:
                    read[name].append(data)
                else:
                    del open_[name]
            if not ready and process.poll() is not None and not _pending(open_):
                break
    finally:
        if process.poll() is None:
            process.kill()
        for fd in readers.values():
            os.close(fd)
    code = process.wait(timeout=10)
    text = {
        name: b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
        for name, chunks in read.items()
    }
    return Streams(code, text["stdout"], text["stderr"])


def _pending(fds: dict[str, int]) -> bool:
    ready, _, _ = select.select(list(fds.values()), [], [], 0)
    return bool(ready)


def run_bash_at_a_terminal(
    script: str, stdout: Path, cwd: Path, env: dict[str, str], timeout: float = 180
) -> tuple[int, str]:
    """`script` run by bash as pasted at a terminal whose output is redirected: stdin
    and stderr the terminal, stdout the file `stdout`; the exit code and the screen."""
    leader, follower = pty.openpty()
    env = {**terminal_env(), **env}
    size = struct.pack("HHHH", int(env["LINES"]), int(env["COLUMNS"]), 0, 0)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, size)
    with open(stdout, "wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", script],
            stdin=follower,
            stdout=out,
            stderr=follower,
            cwd=cwd,
            env=env,
            close_fds=True,
        )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the last writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            pytest.fail(f"still running after {timeout} s: {b''.join(chunks)[-2000:]!r}")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return process.wait(timeout=10), b"".join(chunks).decode("utf-8", "replace")
