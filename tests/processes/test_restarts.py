"""A PostgreSQL server restarted (pg_ctl restart) or briefly away under running
long-running commands: an idle `work --loop`, `events --follow`, `relay` and `status
--wait` reconnect with backoff and go on; past KB_RECONNECT_SECONDS they exit 1 saying
so. Each test runs a server of its own, so that no other test sees the restarts."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.helpers import (
    ON_POSTGRES,
    finish,
    kb_env,
    own_postgres,
    run_kb,
    start_kb,
    wait_until,
)
from tests.loopback import JsonHandler, serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ON_POSTGRES, reason="restarts a PostgreSQL server"),
]


class Receiver:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.types: list[str] = []

    def handler(self) -> type[JsonHandler]:
        receiver = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                with receiver.lock:
                    receiver.types.append(self.read_json()["type"])
                self.send_json(200, {})

        return Handler

    def count(self, event_type: str) -> int:
        with self.lock:
            return self.types.count(event_type)


class Lines:
    """A process's stdout read line by line in a thread, so the test can look at what
    it printed so far while it runs."""

    def __init__(self, proc) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            self.lines.append(line)

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))


def submit(tmp_path, name: str, env: dict) -> dict:
    path = tmp_path / name
    path.write_text(f"a note called {name}")
    result = run_kb("upload", str(path), "--submit", "--json", env=env)
    assert result.code == 0, result.stderr
    return result.record


def test_idle_commands_ride_out_a_server_restart(tmp_path):
    with own_postgres() as server, serving((receiver := Receiver()).handler()) as port:
        env = kb_env(DATABASE_URL=server.url)
        submit(tmp_path, "first.txt", env)
        work = start_kb("work", "--loop", "--json", env=env)
        follow = start_kb("events", "--follow", "--json", env=env)
        relay = start_kb("relay", "--webhook", f"http://127.0.0.1:{port}/", "--json", env=env)
        printed = Lines(follow)
        processes = (work, follow, relay)
        try:
            wait_until(lambda: receiver.count("task.succeeded") == 1, timeout=60)
            server.control("restart")
            time.sleep(1.0)  # each is idle again, its connections gone with the server
            submit(tmp_path, "second.txt", env)  # before: no worker took it, ever
            wait_until(lambda: receiver.count("task.succeeded") == 2, timeout=60)
            wait_until(lambda: printed.count('"task.succeeded"') == 2, timeout=30)
            assert all(proc.poll() is None for proc in processes)
            for proc in processes:
                proc.send_signal(signal.SIGTERM)
            results = [finish(proc, timeout=30) for proc in processes]
        finally:
            for proc in processes:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert [result.code for result in results] == [0, 0, 0], [r.stderr for r in results]


def test_a_short_outage_is_ridden_out_and_a_long_one_ends_with_exit_1(tmp_path):
    with own_postgres() as server:
        env = kb_env(DATABASE_URL=server.url, KB_RECONNECT_SECONDS="5")
        task = submit(tmp_path, "note.txt", env)
        wait = start_kb("status", task["task_id"], "--wait", "--json", env=env)
        follow = start_kb("events", "--follow", "--json", env=env)
        printed = Lines(follow)
        try:
            wait_until(lambda: printed.count('"task.queued"') == 1, timeout=30)
            # The wait started first; let it pass its guard (a command that starts while
            # the server is down fails at once: only a running one rides an outage out).
            time.sleep(1.0)
            server.control("halt")
            time.sleep(2.0)  # shorter than KB_RECONNECT_SECONDS
            server.control("resume")
            assert wait.poll() is None and follow.poll() is None
            assert run_kb("work", "--json", env=env).code == 0
            done = finish(wait, timeout=30)
            assert done.code == 0 and done.record["status"] == "succeeded", done.stderr
            wait_until(lambda: printed.count('"task.succeeded"') == 1, timeout=30)

            started = time.monotonic()  # before the halt: the command may notice it first
            server.control("halt")  # longer than KB_RECONNECT_SECONDS
            follow.wait(timeout=30)
            waited = time.monotonic() - started
            printed.thread.join(timeout=5)
            error = follow.stderr.read()
        finally:
            server.control("resume")  # so that it stops cleanly
            for proc in (wait, follow):
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert follow.returncode == 1, error
    assert 5 <= waited < 15, waited
    assert "still unreachable after 5 s" in error and "KB_RECONNECT_SECONDS" in error


def test_a_looping_worker_interrupted_mid_task_takes_its_task_over_after_an_outage(tmp_path):
    """The server away in the middle of a task: the worker's next write fails, so the
    task stays claimed; `--loop` goes on, waits for the server, and once the lease has
    run out claims the task again (attempt 2) and completes it. (A restart between two
    writes goes unnoticed: the next write connects anew.)"""
    with own_postgres() as server:
        env = kb_env(DATABASE_URL=server.url)
        path = tmp_path / "long.txt"
        path.write_text("\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(10)))
        result = run_kb("upload", str(path), "--submit", "--json", env=env)
        task_id = result.record["task_id"]
        args = ("work", "--loop", "--stage-delay", "0.5", "--lease-seconds", "3", "--json")
        work = start_kb(*args, env=env)

        def status() -> dict:
            return run_kb("status", task_id, "--json", env=env).record

        try:
            wait_until(lambda: status()["status"] == "running", timeout=60)
            server.control("halt")
            time.sleep(2.0)  # the worker writes progress every 0.5 s
            server.control("resume")
            done = wait_until(
                lambda: (record := status())["status"] == "succeeded" and record, timeout=90
            )
            assert work.poll() is None
            work.send_signal(signal.SIGTERM)
            ended = finish(work, timeout=30)
        finally:
            if work.poll() is None:
                work.kill()
                work.communicate()
    assert ended.code == 0, ended.stderr
    assert done["attempt"] == 2
    assert f"interrupted task={task_id}" in ended.stderr
