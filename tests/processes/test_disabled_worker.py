"""A user disabled while its worker runs: the real `kb work` process releases its task
at its next write and exits forbidden; the task is never lost, and another worker
completes it."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.helpers import db_rows, finish, kb_env, run_in_process, start_kb, wait_until
from tests.loopback import JsonHandler, serving


class Receiver:
    """A webhook that accepts every event and keeps their ids."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accepted: list[int] = []

    def handler(self) -> type[JsonHandler]:
        receiver = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                with receiver.lock:
                    receiver.accepted.append(self.read_json()["event_id"])
                self.send_json(200, {})

        return Handler

    def ids(self) -> list[int]:
        with self.lock:
            return list(self.accepted)


# What sets the scene, changes a user or looks at the outcome runs the CLI in the test's
# process; the commands under test are real `kb` processes (start_kb).


def token_of(result) -> str:
    assert result.code == 0, result.stderr
    return result.record["token"]


def test_a_disabled_users_running_worker_releases_its_task_and_stops(tmp_path):
    admin = token_of(run_in_process("user", "add", "root", "--role", "admin", "--json"))
    as_admin = kb_env(KB_TOKEN=admin)
    robot = token_of(
        run_in_process("user", "add", "robot", "--role", "worker", "--json", env=as_admin)
    )
    path = tmp_path / "long.txt"
    # Long enough (its steps paced by --stage-delay) that the worker is still running
    # when a loaded machine has run `status` and `user disable` as processes.
    path.write_text("\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(40)))
    [task] = run_in_process("upload", str(path), "--submit", "--json", env=as_admin).records
    args = ("work", "--stage-delay", "0.3", "--worker-id", "R", "--json")
    worker = start_kb(*args, env=kb_env(KB_TOKEN=robot))
    wait_until(
        lambda: (
            run_in_process("status", task["task_id"], "--json", env=as_admin).record["status"]
            == "running"
        ),
        timeout=20,
        message="the worker never started the task",
    )
    disabled = run_in_process("user", "disable", "robot", "--json", env=as_admin)
    assert disabled.code == 0 and disabled.record["state"] == "disabled"

    result = finish(worker, args, timeout=30)
    assert result.code == 5, (result.stdout, result.stderr)
    error = json.loads(result.stderr.strip().splitlines()[-1])
    assert error["error"] == "forbidden" and "user robot is disabled" in error["message"]
    assert f"task {task['task_id']} was released" in error["message"]
    assert f"released task={task['task_id']} worker=R" in result.stderr

    released = run_in_process("status", task["task_id"], "--json", env=as_admin).record
    assert (released["status"], released["attempt"], released["worker_id"]) == ("queued", 0, None)
    assert not db_rows("SELECT id FROM chunks WHERE task_id = :id", id=task["task_id"])
    events = db_rows(
        "SELECT actor, action, detail FROM audit_events WHERE entity_id = :id ORDER BY id",
        id=task["task_id"],
    )
    [release] = [event for event in events if event["action"] == "release"]
    assert release["actor"] == "robot" and "user robot is disabled" in release["detail"]

    # The same token starts no worker any more; the refusal is recorded.
    again = run_in_process("work", "--json", env=kb_env(KB_TOKEN=robot))
    assert again.code == 5 and json.loads(again.stderr)["error"] == "forbidden"
    assert db_rows("SELECT id FROM audit_events WHERE actor = 'robot' AND action = 'refused'")

    # Another worker completes the task: attempt 1 (the release gave its attempt back).
    other = token_of(
        run_in_process("user", "add", "other", "--role", "worker", "--json", env=as_admin)
    )
    done = run_in_process("work", "--json", env=kb_env(KB_TOKEN=other))
    assert done.code == 0, done.stderr
    assert (done.record["task"]["status"], done.record["task"]["attempt"]) == ("succeeded", 1)


@pytest.mark.parametrize("change", ["disable", "token"])
def test_every_long_running_command_of_a_revoked_caller_stops(tmp_path, change):
    """`events --follow`, `status --wait`, `relay` and an idle `work --loop` check their
    caller on each wake-up: once the user is disabled, or its token replaced, each exits
    forbidden (5) with the guard's message, and prints or posts nothing written after."""
    admin = token_of(run_in_process("user", "add", "root", "--role", "admin", "--json"))
    as_admin = kb_env(KB_TOKEN=admin)
    alice = token_of(
        run_in_process("user", "add", "alice", "--role", "viewer", "--json", env=as_admin)
    )
    robot = token_of(
        run_in_process("user", "add", "robot", "--role", "worker", "--json", env=as_admin)
    )
    busy = token_of(
        run_in_process("user", "add", "busy", "--role", "worker", "--json", env=as_admin)
    )
    path = tmp_path / "long.txt"
    # Long enough (its steps paced by --stage-delay) that the worker is still running
    # when a loaded machine has run `status` and `user disable` as processes.
    path.write_text("\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(40)))
    [task] = run_in_process("upload", str(path), "--submit", "--json", env=as_admin).records
    # A task kept running by another user's worker, for `status --wait` to wait on.
    slow = start_kb("work", "--stage-delay", "10", "--json", env=kb_env(KB_TOKEN=busy))
    wait_until(
        lambda: (
            db_rows("SELECT status FROM ingestion_tasks WHERE id = :id", id=task["task_id"])[0][
                "status"
            ]
            == "running"
        ),
        timeout=30,
        message="the busy worker never started the task",
    )
    receiver = Receiver()
    with serving(receiver.handler()) as port:
        as_alice, as_robot = kb_env(KB_TOKEN=alice), kb_env(KB_TOKEN=robot)
        commands = {
            "follow": start_kb("events", "--follow", "--json", env=as_alice),
            "wait": start_kb("status", task["task_id"], "--wait", "--json", env=as_alice),
            "relay": start_kb(
                "relay", "--webhook", f"http://127.0.0.1:{port}/kb", "--json", env=as_robot
            ),
            "work": start_kb("work", "--loop", "--worker-id", "R", "--json", env=as_robot),
        }
        try:
            wait_until(lambda: len(receiver.ids()) >= 1, timeout=30, message="relay never posted")
            time.sleep(1.0)  # every command is past its start-up and waiting
            assert all(proc.poll() is None for proc in commands.values())
            events_before = len(db_rows("SELECT id FROM outbox_events"))
            changed = run_in_process("user", change, "alice", "--json", env=as_admin)
            assert changed.code == 0, changed.stderr
            changed = run_in_process("user", change, "robot", "--json", env=as_admin)
            assert changed.code == 0, changed.stderr
            # A new event at once: none of them may print or post it.
            other = tmp_path / "other.txt"
            other.write_text("another note")
            run_in_process("upload", str(other), "--submit", "--json", env=as_admin)
            results = {name: finish(proc, timeout=30) for name, proc in commands.items()}
            posted = receiver.ids()
        finally:  # a command that did not stop is not left behind
            for proc in [*commands.values(), slow]:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    expected = {
        "disable": "is disabled (an admin can run: kb user enable",
        "token": "KB_TOKEN is not a valid token",
    }[change]
    for name, result in results.items():
        assert result.code == 5, (name, result.stdout, result.stderr)
        error = json.loads(result.stderr.strip().splitlines()[-1])
        assert error["error"] == "forbidden" and expected in error["message"], name
    new_events = {row["id"] for row in db_rows("SELECT id FROM outbox_events")}
    later_ids = sorted(new_events)[events_before:]
    assert later_ids, "the upload after the change wrote no event"
    printed = {record["event_id"] for record in results["follow"].records}
    assert not printed & set(later_ids)
    assert not set(posted) & set(later_ids)
    refused = db_rows(
        "SELECT actor FROM audit_events WHERE action = 'refused' AND actor IN ('alice', 'robot')"
    )
    assert {row["actor"] for row in refused} == {"alice", "robot"}
