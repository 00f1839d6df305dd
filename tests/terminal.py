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
    **env: str,
) -> tuple[int, str]:
    """Run `kb` with stdin, stdout and stderr on a pseudo-terminal; return the screen text.
    A command that runs until stopped gets Ctrl-C a second after `interrupt_on` was drawn;
    `answer` (prompt, reply) types the reply once the prompt was drawn."""
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
