"""`kb sync` as real processes: killed with SIGKILL part-way and run again, and two
syncs of one source into one base at the same time, converge to one document per path
with no duplicate, no lost file and no orphan object (on SQLite and PostgreSQL)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    db_rows,
    finish,
    kb_env,
    kb_json,
    object_keys,
    run_in_process,
    run_kb,
    start_kb,
)

FILES = 120


def source_tree(root: Path) -> Path:
    for i in range(FILES):
        folder = root / f"part{i % 6}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note{i:03}.md").write_text(f"# Note {i}\n\nThe text of note {i}.\n", "utf-8")
    return root


def converged(source: Path) -> None:
    """One live document per file, each path once; every object named by one."""
    documents = kb_json("status")
    paths = [document["meta"]["path"] for document in documents]
    expected = sorted(str(p.relative_to(source)) for p in source.rglob("*.md"))
    assert sorted(paths) == expected
    rows = db_rows("SELECT count(*) AS n FROM documents")
    assert rows[0]["n"] == FILES
    doctor = run_in_process("doctor", "--json")
    assert doctor.code == 0, doctor.stdout


@pytest.mark.slow
def test_a_killed_sync_run_again_converges(tmp_path):
    source = source_tree(tmp_path / "src")
    victim = start_kb("sync", str(source), "--json")
    seen = 0
    assert victim.stdout is not None
    for line in victim.stdout:  # killed in the middle of the walk, between any two steps
        seen += json.loads(line).get("action") == "added"
        if seen == FILES // 3:
            break
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    again = run_kb("sync", str(source), "--json", timeout=120)
    assert again.code == 0, again.stderr
    actions = [record.get("action") for record in again.records[:-1]]
    assert actions.count("added") >= FILES - FILES // 3 - 1
    assert set(actions) <= {"added", "unchanged"}
    converged(source)
    # The file being stored at the kill was recorded as pending before it was written:
    # the run again deleted it, so no object is left that no document names.
    assert len(object_keys()) == FILES
    assert db_rows("SELECT count(*) AS n FROM pending_objects")[0]["n"] == 0
    final = run_kb("sync", str(source), "--json")
    assert {record.get("action") for record in final.records[:-1]} == {"unchanged"}


@pytest.mark.slow
def test_two_syncs_at_once_make_no_duplicate(tmp_path):
    source = source_tree(tmp_path / "src")
    first = start_kb("sync", str(source), "--json")
    second = start_kb("sync", str(source), "--json")
    results = [finish(first, timeout=180), finish(second, timeout=180)]
    for result in results:
        assert result.code == 0, result.stderr
    added = [
        record["path"]
        for result in results
        for record in result.records
        if record.get("action") == "added"
    ]
    assert sorted(added) == sorted(set(added)) and len(added) == FILES
    converged(source)
    assert len(object_keys()) == FILES  # the loser of each race removed its object
    assert db_rows("SELECT count(*) AS n FROM pending_objects")[0]["n"] == 0


# Stores one object the way upload and sync do (recorded as pending, then written), and
# is killed before any document names it.
KILLED_AFTER_STORING = """
import io, os, signal
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli import intake, pending
kb = Kb.open(resolve_settings(), actor="tester")
intake.claimed_store(kb)
[key] = pending.reserve(kb, 1)
kb.store.put(io.BytesIO(b"Half done: no row names this."), 1 << 20, key)
print(key, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_object_stored_by_a_killed_command_is_no_orphan(tmp_path):
    """Between storing an object and committing its row, SIGKILL: kb doctor reports the
    object as abandoned at once (not after an orphan's grace period), and the next sync
    on this host deletes it, so doctor is clean right after."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.md").write_text("# A\n\nThe text of a.\n", "utf-8")
    assert run_in_process("sync", str(source)).code == 0
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_STORING], env=kb_env(), capture_output=True, text=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    key = killed.stdout.strip()
    assert key in object_keys()
    doctor = run_in_process("doctor", "--json")
    assert doctor.code == 4, doctor.stdout
    [problem] = json.loads(doctor.stdout)["problems"]
    assert (problem["kind"], problem["id"]) == ("abandoned_object", key)
    again = run_kb("sync", str(source), "--json")
    assert again.code == 0, again.stderr
    assert key not in object_keys() and len(object_keys()) == 1
    assert run_in_process("doctor", "--json").code == 0
    assert db_rows("SELECT count(*) AS n FROM pending_objects")[0]["n"] == 0


def readme_ci_block() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [block] = [
        match
        for match in re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M)
        if "kb sync docs" in match
    ]
    return block


KB_IS_THIS_KB = f'kb() {{ "{sys.executable}" -m kb_cli "$@"; }}\n'


@pytest.mark.slow
def test_the_readme_ci_job_runs_as_pasted(tmp_path):
    """The README's CI example, with a worker running: synced, waited for, published,
    gated by kb eval; then run again after an edit, and with a failing gate."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text("# Leave\n\nEmployees get 25 days of annual leave.\n")
    (docs / "travel.md").write_text("# Travel\n\nTrain travel is booked in second class.\n")
    questions = [
        {"question": "How many days of annual leave?", "expected": ["leave.md"]},
        {"question": "Which class for train travel?", "expected": ["travel.md"]},
    ]
    (docs / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    assert run_kb("base", "create", "docs").code == 0
    worker = start_kb("work", "--loop", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def job() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", KB_IS_THIS_KB + readme_ci_block()],
            cwd=tmp_path,
            env=kb_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )

    try:
        first = job()
        assert first.returncode == 0, first.stdout + first.stderr
        assert "added" in first.stdout and "hit_at_k" not in first.stderr
        (docs / "leave.md").write_text("# Leave\n\nEmployees get 30 days of annual leave.\n")
        second = job()
        assert second.returncode == 0, second.stdout + second.stderr
        assert re.search(r'^changed "leave.md"', second.stdout, re.M)
        (docs / "leave.md").unlink()
        (docs / "travel.md").unlink()
        gated = job()
        assert gated.returncode == 4, gated.stdout + gated.stderr  # the eval gate
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def test_on_a_terminal_sync_counts_live_and_reparse_asks_first(tmp_path):
    from tests.terminal import ANSI, run_in_terminal

    source = tmp_path / "src"
    for i in range(40):
        (source / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (source / f"d{i % 4}" / f"n{i:02}.md").write_text(f"# N{i}\n\nnote {i}\n", "utf-8")
    code, screen = run_in_terminal("sync", str(source))
    text = ANSI.sub("", screen)
    assert code == 0, text
    assert "scanned" in text and "uploaded" in text  # the live count on stderr
    assert 'added "d0/n00.md"' in text and "added=40" in text
    for document in kb_json("status")[:2]:  # two drafts to parse again; 38 being processed
        assert run_in_process("cancel", document["latest_task"]["task_id"]).code == 0
    code, screen = run_in_terminal("reparse", "--all", answer=("[y/N] ", "n\n"))
    text = ANSI.sub("", screen)
    assert code == 1 and "nothing queued" in text
    # What will be done is counted and listed; what is left as it is, counted apart.
    assert "parse 2 documents again as new revisions (38 others left as they are)?" in text
    assert len([line for line in text.splitlines() if line.endswith("(draft)")]) == 2
    assert {d["revision"] for d in kb_json("status")} == {1}


# Root reads every folder whatever its mode: a `kb sync` run by root is run without the
# two capabilities that allow it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a folder
# of mode 000 is as unreadable to it as to any user; it still owns its home.
DROP_READ_ANYTHING = "-dac_override,-dac_read_search"


def as_an_ordinary_user(*args: str) -> list[str]:
    command = [sys.executable, "-m", "kb_cli", *args]
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("tests run as root and setpriv (util-linux) is missing: no way to be denied")
    return [
        setpriv,
        f"--inh-caps={DROP_READ_ANYTHING}",
        f"--bounding-set={DROP_READ_ANYTHING}",
        *command,
    ]


def test_a_folder_sync_may_not_read_is_failed_and_its_documents_kept(tmp_path):
    """A real `kb sync` denied a folder: the folder is `failed` with the reason, an
    unreadable file too, the rest goes on; a document synced from that folder before is
    not missing (not deleted, even with --missing delete), and is there once readable."""
    source = source_tree(tmp_path / "src")
    assert run_in_process("sync", str(source)).code == 0  # the scene: 120 documents
    locked = source / "part1"
    secret = source / "part2" / "secret.md"
    secret.write_text("# Secret\n\nNot for kb.\n", "utf-8")
    locked.chmod(0)
    secret.chmod(0)
    try:
        denied = subprocess.run(
            as_an_ordinary_user("sync", str(source), "--missing", "delete", "--json"),
            env=kb_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        locked.chmod(0o755)
        secret.chmod(0o644)
    assert denied.returncode == 6, denied.stderr
    records = {r["path"]: r for r in map(json.loads, denied.stdout.splitlines()[:-1])}
    assert records["part1/"]["action"] == "failed"
    assert records["part1/"]["reason"] == "folder not readable: Permission denied"
    assert records["part2/secret.md"]["action"] == "failed"
    assert records["part2/secret.md"]["reason"] == "not readable: Permission denied"
    under_locked = [p for p in records if p.startswith("part1/") and p != "part1/"]
    assert len(under_locked) == FILES // 6
    assert {records[p]["action"] for p in under_locked} == {"skipped"}
    assert {records[p]["reason"] for p in under_locked} == {
        "its folder could not be read; left as it is"
    }
    rest = [r for p, r in records.items() if not p.startswith(("part1/", "part2/secret"))]
    assert len(rest) == FILES - FILES // 6 and {r["action"] for r in rest} == {"unchanged"}
    assert db_rows("SELECT count(*) AS n FROM documents")[0]["n"] == FILES
    readable = run_in_process("sync", str(source), "--json")
    assert readable.code == 0, readable.stderr
    actions = {r["path"]: r["action"] for r in readable.records[:-1]}
    assert actions.pop("part2/secret.md") == "added"
    assert set(actions.values()) == {"unchanged"} and len(actions) == FILES


SECRET_WORD = "quokkasecret"


def _flipping(stop, swap) -> None:
    """Call `swap` again and again until `stop` is set: whoever writes to the folder
    while the sync walks it. Each state holds a few milliseconds, as a person's (or a
    tool's) change would."""
    while not stop.is_set():
        swap(stop)


@pytest.mark.slow
def test_syncs_racing_swaps_to_links_never_store_what_lies_outside(tmp_path):
    """Real `kb sync` processes while the folder changes under them: a subfolder is
    swapped for a link to an outside folder once the walk has listed it (its first
    record printed), and files flip
    between themselves and links to an outside file all along (on the walk by path,
    the outside file was stored in 5 runs of 5)."""
    import threading

    source = source_tree(tmp_path / "src")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n\nThe {SECRET_WORD} is here.\n", "utf-8")
    sub, away = source / "part4", source / "part4-away"
    flips = [source / "part5" / f"note{i:03}.md" for i in (101, 107, 113, 119)]

    def flip(stop) -> None:
        with contextlib.suppress(OSError):
            for path in flips:
                path.unlink()
                path.symlink_to(outside / "secret.md")
            stop.wait(0.01)
            for path in flips:
                path.unlink()
                path.write_text("# Note\n\nA note.\n", "utf-8")
            stop.wait(0.01)

    for _run in range(3):
        stop = threading.Event()
        meddler = threading.Thread(target=_flipping, args=(stop, flip), daemon=True)
        sync = start_kb("sync", str(source), "--checksum", "--json")
        meddler.start()
        try:
            assert sync.stdout is not None
            sync.stdout.readline()  # a first record: the root is listed, part4/ not walked
            sub.rename(away)
            sub.symlink_to(outside, target_is_directory=True)
            done = finish(sync, timeout=120)
            assert done.code in (0, 6), done.stderr
        finally:
            stop.set()
            meddler.join(timeout=10)
            if sub.is_symlink():
                sub.unlink()
                away.rename(sub)
    assert not any(SECRET_WORD.encode() in content for content in _stored())


def _stored() -> list[bytes]:
    """The content of every object a document of this test's knowledge base names."""
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings

    kb = Kb.open(resolve_settings(), create=False)
    try:
        keys = [row["object_key"] for row in db_rows("SELECT object_key FROM documents")]
        return [b"".join(kb.store.read_blocks(key)) for key in keys]
    finally:
        kb.db.close()


def test_a_file_swapped_for_a_fifo_mid_walk_neither_hangs_nor_stops_the_sync(tmp_path):
    """Files swapped for FIFOs once their folder is listed (its first record printed):
    a sync that opened them by path blocked in open() for ever, SIGINT included."""
    source = source_tree(tmp_path / "src")
    fifos = [source / "part5" / f"note{i:03}.md" for i in (107, 113, 119)]  # walked last
    sync = start_kb("sync", str(source), "--json")
    assert sync.stdout is not None
    first = []
    for line in sync.stdout:
        first.append(json.loads(line))
        if first[-1].get("path", "").startswith("part5/"):
            break
    for path in fifos:
        path.unlink()
        os.mkfifo(path)
    try:
        sync.wait(timeout=60)
    except subprocess.TimeoutExpired:
        sync.send_signal(signal.SIGINT)
        try:
            sync.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sync.kill()
            pytest.fail("the sync hung on a FIFO, and SIGINT did not end it")
        pytest.fail("the sync hung on a FIFO (SIGINT ended it)")
    rest = finish(sync)
    records = {r["path"]: r for r in first + rest.records if "path" in r}
    assert sync.returncode == 0, rest.stderr
    for path in fifos:
        record = records[str(path.relative_to(source))]
        assert (record["action"], record["reason"]) == (
            "skipped", "changed while being synced: not a file any more",
        )  # fmt: skip
    assert sum(r.get("action") == "added" for r in records.values()) == FILES - len(fifos)


def _synced_then_two_gone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder of three files synced, then two of them removed and one added."""
    source = tmp_path / "share"
    source.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (source / name).write_text(f"# {name}\n\nwords\n", "utf-8")
    records = run_in_process("sync", str(source), "--json").records[:-1]
    (source / "a.md").unlink()
    (source / "b.md").unlink()
    (source / "d.md").write_text("# d\n\nwords\n", "utf-8")
    return source, {record["path"]: record["document_id"] for record in records}


def _documents() -> set[str]:
    return {row["id"] for row in db_rows("SELECT id FROM documents")}


@pytest.mark.parametrize(("reply", "deleted"), [("n\n", False), ("y\n", True)])
def test_sync_missing_delete_asks_once_on_a_terminal_before_deleting(tmp_path, reply, deleted):
    from tests.terminal import ANSI, run_in_terminal

    source, ids = _synced_then_two_gone(tmp_path)
    before = _documents()
    at_the_question: list[set[str]] = []
    code, screen = run_in_terminal(
        "sync",
        str(source),
        "--missing",
        "delete",
        answer=("[y/N] ", reply),
        on_prompt=lambda: at_the_question.append(_documents()),
    )
    text = ANSI.sub("", screen)
    question = "delete 2 documents whose files are gone? [y/N]"
    assert text.count(question) == 1
    # Asked after the walk (d.md is added) and before anything was deleted.
    [seen] = at_the_question
    assert before <= seen and len(seen) == len(before) + 1
    assert text.index('added "d.md"') < text.index(question)
    for gone in ("a.md", "b.md"):
        assert f"  {ids[gone][:8]}  {gone}  (processing)" in text  # the list asked about
    if deleted:
        assert code == 0, text
        assert _documents() == seen - {ids["a.md"], ids["b.md"]}
        assert text.count('reason="deleted"') == 2
    else:
        assert code == 1, text
        assert _documents() == seen  # nothing deleted
        assert "nothing deleted: those documents are kept" in text
        assert text.count('reason="kept (not confirmed)"') == 2
        assert "missing=2" in text  # the summary still printed


def test_sync_missing_delete_is_not_asked_piped_or_with_yes(tmp_path):
    from tests.terminal import ANSI, run_in_terminal

    source, ids = _synced_then_two_gone(tmp_path)
    piped = run_kb("sync", str(source), "--missing", "delete")
    assert piped.code == 0, piped.stderr
    assert "[y/N]" not in piped.stderr
    assert ids["a.md"] not in _documents() and ids["b.md"] not in _documents()
    (source / "c.md").unlink()
    code, screen = run_in_terminal("sync", str(source), "--missing", "delete", "--yes")
    assert code == 0 and "[y/N]" not in screen
    assert 'missing "c.md"' in ANSI.sub("", screen) and ids["c.md"] not in _documents()


def test_sync_missing_unpublish_answered_no_keeps_them_served(tmp_path):
    from tests.terminal import ANSI, run_in_terminal

    source, ids = _synced_then_two_gone(tmp_path)
    assert run_in_process("work", "--drain").code == 0
    assert run_in_process("publish", "--all-reviewed").code == 0
    code, screen = run_in_terminal(
        "sync", str(source), "--missing", "unpublish", answer=("[y/N] ", "n\n")
    )
    text = ANSI.sub("", screen)
    assert code == 1, text
    assert "unpublish 2 documents whose files are gone? [y/N]" in text
    assert "nothing unpublished: those documents are kept" in text
    for gone in ("a.md", "b.md"):
        assert run_in_process("status", ids[gone], "--json").record["status"] == "published"
