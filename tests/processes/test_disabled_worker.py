"""A user disabled while its worker runs: the real `kb work` process releases its task
at its next write and exits forbidden; the task is never lost, and another worker
completes it."""

from __future__ import annotations

import json

from tests.helpers import db_rows, finish, kb_env, run_kb, start_kb, wait_until


def token_of(result) -> str:
    assert result.code == 0, result.stderr
    return result.record["token"]


def test_a_disabled_users_running_worker_releases_its_task_and_stops(tmp_path):
    admin = token_of(run_kb("user", "add", "root", "--role", "admin", "--json"))
    as_admin = kb_env(KB_TOKEN=admin)
    robot = token_of(run_kb("user", "add", "robot", "--role", "worker", "--json", env=as_admin))
    path = tmp_path / "long.txt"
    path.write_text("\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(10)))
    [task] = run_kb("upload", str(path), "--submit", "--json", env=as_admin).records
    args = ("work", "--stage-delay", "0.3", "--worker-id", "R", "--json")
    worker = start_kb(*args, env=kb_env(KB_TOKEN=robot))
    wait_until(
        lambda: (
            run_kb("status", task["task_id"], "--json", env=as_admin).record["status"] == "running"
        ),
        timeout=20,
        message="the worker never started the task",
    )
    disabled = run_kb("user", "disable", "robot", "--json", env=as_admin)
    assert disabled.code == 0 and disabled.record["state"] == "disabled"

    result = finish(worker, args, timeout=30)
    assert result.code == 5, (result.stdout, result.stderr)
    error = json.loads(result.stderr.strip().splitlines()[-1])
    assert error["error"] == "forbidden" and "user robot is disabled" in error["message"]
    assert f"task {task['task_id']} was released" in error["message"]
    assert f"released task={task['task_id']} worker=R" in result.stderr

    released = run_kb("status", task["task_id"], "--json", env=as_admin).record
    assert (released["status"], released["attempt"], released["worker_id"]) == ("queued", 1, None)
    assert not db_rows("SELECT id FROM chunks WHERE task_id = :id", id=task["task_id"])
    events = db_rows(
        "SELECT actor, action, detail FROM audit_events WHERE entity_id = :id ORDER BY id",
        id=task["task_id"],
    )
    [release] = [event for event in events if event["action"] == "release"]
    assert release["actor"] == "robot" and "user robot is disabled" in release["detail"]

    # The same token starts no worker any more; the refusal is recorded.
    again = run_kb("work", "--json", env=kb_env(KB_TOKEN=robot))
    assert again.code == 5 and json.loads(again.stderr)["error"] == "forbidden"
    assert db_rows("SELECT id FROM audit_events WHERE actor = 'robot' AND action = 'refused'")

    # Another worker completes the task: attempt 2, nothing lost.
    other = token_of(run_kb("user", "add", "other", "--role", "worker", "--json", env=as_admin))
    done = run_kb("work", "--json", env=kb_env(KB_TOKEN=other))
    assert done.code == 0, done.stderr
    assert (done.record["task"]["status"], done.record["task"]["attempt"]) == ("succeeded", 2)
