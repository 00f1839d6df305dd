"""Black-box acceptance tests written only from the documented interface (README: commands,
records, exit codes, the two state machines).

Every test drives the real `kb` entry point with a given argv and environment, the way
an external CI script would, and looks only at exit codes, stdout, stderr and the files
that are documented to exist (`<home>/kb.sqlite3`, `<home>/objects`). Every command here
runs in this process (a fresh environment each time, no Python start-up to pay); the
contract's concurrent workers, waits and the console script run as real `kb` processes
in tests/processes/test_contract_processes.py.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from datetime import datetime as dt
from pathlib import Path

import pytest

from tests.docgen import make_encrypted_pdf, make_pdf
from tests.helpers import (
    SAMPLES,
    SEARCH_KEYS,
    STAGES,
    Result,
    assert_doc_record,
    assert_queued_fresh,
    assert_task_record,
    assert_work_line,
    check_error,
    check_output_hygiene,
    clean_env,
    doc_of,
    kb_json,
    object_keys,
    run_in_process,
    sqlite_only,
)
from tests.helpers import kb_checked as kb

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


# --- plumbing ----------------------------------------------------------------------------


def kb_error(
    *args: str | Path,
    exit: int,
    code: str,
    env: dict[str, str] | None = None,
) -> dict:
    """Run a command that must fail; check the one-line JSON error on stderr."""
    return check_error(kb(*args, "--json", expect=None, env=env), exit, code)


def run_table(
    commands: dict[str, list[str]],
    env: dict[str, str] | None = None,
) -> dict[str, Result]:
    """Run independent commands (each with --json); results by name."""
    results = {}
    for name, args in commands.items():
        argv = tuple(str(a) for a in (*args, "--json"))
        results[name] = run_in_process(*argv, env=env)
        check_output_hygiene(argv, results[name])
    return results


def write(directory: Path, name: str, data: str | bytes) -> Path:
    path = directory / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def sample(name: str) -> Path:
    return SAMPLES / name


def object_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def by_filename(records: list[dict]) -> dict[str, dict]:
    return {r["filename"]: r for r in records}


# --- 1. invocation and storage -------------------------------------------------------------


@pytest.mark.empty_database  # no home: help and version must not make one
@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["upload", "--help"],
        ["status", "--help"],
        ["work", "--help"],
    ],
    ids=" ".join,
)
def test_version_and_help_do_not_touch_the_database(args, kb_home: Path, tmp_path: Path):
    result = kb(*args)
    assert result.stdout.strip()
    if args == ["--version"]:
        assert re.search(r"\d+\.\d+", result.stdout)
    assert not (kb_home / "kb.sqlite3").exists()
    assert not (tmp_path / ".kb").exists()


@sqlite_only
def test_flag_beats_environment_beats_default(tmp_path: Path):
    one = write(tmp_path, "one.txt", "first document about apples\n")
    two = write(tmp_path, "two.txt", "second document about pears\n")
    three = write(tmp_path, "three.txt", "third document about plums\n")
    four = write(tmp_path, "four.txt", "fourth document about figs\n")
    five = write(tmp_path, "five.txt", "fifth document about kiwis\n")
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    c_dir, d_dir = tmp_path / "c", tmp_path / "d"
    c_dir.mkdir()
    d_dir.mkdir()

    env_none = clean_env(False)
    env_a = clean_env(False, KB_HOME=home_a)
    env_c = clean_env(
        False,
        KB_HOME=home_a,
        DATABASE_URL=f"sqlite:///{c_dir / 'kb-c.sqlite3'}",
        OBJECT_STORE_ROOT=c_dir / "objs",
    )
    d_flags = (
        "--database-url",
        f"sqlite:///{d_dir / 'kb-d.sqlite3'}",
        "--object-store",
        str(d_dir / "objs"),
    )
    # (environment, global flags, file uploaded, where the database and objects must land)
    cases = [
        (env_none, (), one, tmp_path / ".kb" / "kb.sqlite3", tmp_path / ".kb" / "objects"),
        (env_a, (), two, home_a / "kb.sqlite3", home_a / "objects"),
        (env_a, ("--home", str(home_b)), three, home_b / "kb.sqlite3", home_b / "objects"),
        (env_c, (), four, c_dir / "kb-c.sqlite3", c_dir / "objs"),
        (env_c, d_flags, five, d_dir / "kb-d.sqlite3", d_dir / "objs"),
    ]
    for env, flags, path, *_ in cases:
        kb(*flags, "upload", path, "--json", env=env)
    listings = [kb(*flags, "status", "--json", env=env) for env, flags, *_ in cases]
    for (_env, _flags, path, database, objects), listing in zip(cases, listings, strict=True):
        assert database.is_file(), database
        assert len(object_files(objects)) == 1, objects
        assert [r["filename"] for r in listing.records] == [path.name]


# --- 2. errors and exit codes --------------------------------------------------------------


USAGE_ERRORS = {  # exit 2, "usage"
    "unknown option": ["status", "--bogus"],
    "unknown global option": ["--bogus", "status"],
    "missing FILE": ["upload"],
    "missing file": ["upload", "no-such-file.txt"],
    "one of two files missing": ["upload", "{faq}", "no-such-file.pdf"],
    "missing DOCUMENT_ID": ["submit"],
    "bad --status value": ["status", "--status", "bogus"],
    "non-numeric --stage-delay": ["work", "--stage-delay", "soon"],
    "non-numeric --if-version": ["publish", UNKNOWN_ID, "--if-version", "x"],
}
NOT_FOUND = {  # exit 3, "not_found"
    "status unknown uuid": ["status", UNKNOWN_ID],
    "status unknown prefix": ["status", "abcdef12"],
    "submit": ["submit", UNKNOWN_ID],
    "cancel": ["cancel", UNKNOWN_ID],
    "retry": ["retry", UNKNOWN_ID],
    "publish": ["publish", UNKNOWN_ID],
    "upload --replace": ["upload", "{faq}", "--replace", UNKNOWN_ID],
    "work TASK_ID": ["work", UNKNOWN_ID],
}


@pytest.fixture(scope="module")
def refused_on_empty_home(
    tmp_path_factory: pytest.TempPathFactory, engine_env, _bytecode_cache
) -> dict:
    """Every USAGE_ERRORS and NOT_FOUND command, run concurrently against one empty home."""
    root = tmp_path_factory.mktemp("refused")
    env = clean_env(KB_HOME=root / "home", **engine_env())
    faq = shutil.copy(sample("faq.txt"), root / "faq.txt")
    kb_json("db", "upgrade", env=env)  # create the schema before the crowd arrives
    table = {
        name: [a.replace("{faq}", str(faq)) for a in args]
        for name, args in {**USAGE_ERRORS, **NOT_FOUND}.items()
    }
    results = run_table(table, env=env)
    return {
        "results": results,
        "listing": kb_json("status", env=env),
        "objects": object_files(root / "home" / "objects"),
    }


@pytest.mark.parametrize("name", USAGE_ERRORS)
def test_usage_error_exits_2(refused_on_empty_home: dict, name: str):
    check_error(refused_on_empty_home["results"][name], 2, "usage")


@pytest.mark.parametrize("name", NOT_FOUND)
def test_unknown_id_exits_3(refused_on_empty_home: dict, name: str):
    check_error(refused_on_empty_home["results"][name], 3, "not_found")


def test_refused_uploads_stored_nothing(refused_on_empty_home: dict):
    assert refused_on_empty_home["listing"] == []
    assert refused_on_empty_home["objects"] == []


def test_errors_without_json_are_one_plain_line():
    kb("db", "upgrade", expect=0)  # a knowledge base, so that the id is what is not found
    for args, code in ((["status", UNKNOWN_ID], 3), (["status", "--bogus"], 2)):
        result = kb(*args, expect=code)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert not lines[0].lstrip().startswith("{")


@pytest.mark.empty_database  # no home: a refused upload must not make one
def test_unsupported_extension_stores_nothing(tmp_path: Path, kb_home: Path):
    good = shutil.copy(sample("faq.txt"), tmp_path / "good.txt")
    bad = write(tmp_path, "tool.exe", "MZ not a document")
    kb_error("upload", good, bad, exit=6, code="invalid_input")
    kb_error("upload", bad, "--submit", exit=6, code="invalid_input")
    assert not kb_home.exists()  # refused before any home was made
    kb_json("db", "upgrade")
    assert kb_json("status") == []
    assert object_keys() == []


# --- 3. records, 5. upload / submit / work / publish / search ---------------------------------


def test_upload_several_files_prints_document_records(tmp_path: Path, kb_home: Path):
    files = [
        sample("faq.txt"),
        sample("handbook.pdf"),
        sample("release-notes.docx"),
        shutil.copy(sample("faq.txt"), tmp_path / "SHOUTING.TXT"),
        shutil.copy(sample("ingestion-guide-zh.md"), tmp_path / "Guide.Md"),
    ]
    records = kb_json("upload", *files)
    assert len(records) == len(files)
    by_name = by_filename(records)
    assert set(by_name) == {Path(f).name for f in files}
    for path in map(Path, files):
        record = by_name[path.name]
        assert_doc_record(record)
        data = path.read_bytes()
        assert record["size_bytes"] == len(data)
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
        assert (record["status"], record["version"], record["revision"]) == ("draft", 1, 1)
        assert record["published_revision"] is None
        assert record["latest_task"] is None
    assert by_name["handbook.pdf"]["content_type"] == "application/pdf"
    assert len({r["document_id"] for r in records}) == len(files)

    listed = kb_json("status")
    assert {r["document_id"] for r in listed} == {r["document_id"] for r in records}
    assert len(object_keys()) == len(files)


def test_submit_work_publish_search(tmp_path: Path):
    [doc] = kb_json("upload", sample("faq.txt"))
    doc_id = doc["document_id"]

    [task] = kb_json("submit", doc_id[:8])  # a unique prefix of 6+ characters works
    assert_queued_fresh(task)
    assert task["document_id"] == doc_id

    submitted = doc_of(task)
    assert submitted["status"] == "processing"
    assert submitted["version"] == doc["version"] + 1
    assert submitted["latest_task"]["task_id"] == task["task_id"]

    result = kb("work", "--worker-id", "w-one", "--json")
    [line] = result.records
    assert_work_line(line)
    assert line["claimed"] is True
    assert (line["worker_id"], line["task_id"]) == ("w-one", task["task_id"])
    done = line["task"]
    assert (done["status"], done["attempt"], done["worker_id"]) == ("succeeded", 1, "w-one")
    assert done["error_code"] is None
    assert f"claimed task={task['task_id']} worker=w-one status=running attempt=1" in result.stderr
    for stage in STAGES:
        assert re.search(rf"stage={stage} \d+/\d+", result.stderr), stage

    [by_prefix] = kb_json("status", task["task_id"][:6])
    assert_task_record(by_prefix)
    assert (by_prefix["task_id"], by_prefix["status"]) == (task["task_id"], "succeeded")

    pending = doc_of(task)
    assert pending["status"] == "review_pending"
    assert pending["latest_task"]["status"] == "succeeded"
    assert pending["published_revision"] is None

    assert not [h for h in kb_json("search", "ingestion") if h["document_id"] == doc_id]

    kb_error(
        "publish", doc_id, "--if-version", str(pending["version"] + 1), exit=4, code="conflict"
    )
    [published] = kb_json("publish", doc_id, "--if-version", str(pending["version"]))
    assert_doc_record(published)
    assert (published["status"], published["published_revision"]) == ("published", 1)
    assert published["version"] == pending["version"] + 1

    hits = kb_json("search", "ingestion", "--limit", "5")
    assert hits and len(hits) <= 5
    for hit in hits:
        assert hit.keys() >= SEARCH_KEYS, hit
    assert hits[0]["document_id"] == doc_id
    assert hits[0]["filename"] == "faq.txt" and hits[0]["revision"] == 1
    assert "ingestion" in hits[0]["text"].lower()


def test_upload_submit_prints_tasks_and_drain(tmp_path: Path):
    zh, notes = sample("ingestion-guide-zh.md"), sample("release-notes.docx")
    tasks = kb_json("upload", zh, notes, "--submit")
    assert len(tasks) == 2
    for task in tasks:
        assert_queued_fresh(task)
    assert {r["status"] for r in kb_json("status")} == {"processing"}

    lines = kb("work", "--drain", "--json").records
    claimed = [line for line in lines if line["claimed"]]
    for line in lines:
        assert_work_line(line)
    assert {line["task_id"] for line in claimed} == {t["task_id"] for t in tasks}
    assert {line["task"]["status"] for line in claimed} == {"succeeded"}

    idle = kb("work", "--json")  # nothing claimable: exit 0, no claim
    for line in idle.records:
        assert_work_line(line)
        assert line["claimed"] is False

    docs = by_filename(kb_json("status"))
    assert {d["status"] for d in docs.values()} == {"review_pending"}
    kb_json("publish", docs[zh.name]["document_id"])
    hits = kb_json("search", "入库")
    assert hits and hits[0]["document_id"] == docs[zh.name]["document_id"]
    assert "入库" in hits[0]["text"]


# --- 4. illegal transitions: one world, many refused commands --------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, engine_env, _bytecode_cache) -> dict:
    """Documents in every state: D draft, P processing, R review_pending, X published,
    C draft after a cancelled task."""
    root = tmp_path_factory.mktemp("world")
    env = clean_env(KB_HOME=root / "home", **engine_env())
    files = {
        key: write(root, f"{key}.txt", f"document {key} about lighthouses\n") for key in "DPRXC"
    }
    docs = {r["filename"][0]: r["document_id"] for r in kb_json("upload", *files.values(), env=env)}
    out = {"env": env, "replacement": write(root, "new.txt", "replacement text\n")}
    for key in "RX":
        [task] = kb_json("submit", docs[key], env=env)
        out[f"t{key}"] = task["task_id"]
    kb("work", "--max-tasks", "2", "--json", env=env)
    kb_json("publish", docs["X"], env=env)
    [task] = kb_json("submit", docs["C"], env=env)
    out["tC"] = task["task_id"]
    kb_json("cancel", task["task_id"], env=env)
    [task] = kb_json("submit", docs["P"], env=env)
    out["tP"] = task["task_id"]
    out.update(docs)
    listing = {r["document_id"]: r for r in kb_json("status", env=env)}
    assert [listing[docs[k]]["status"] for k in "DPRXC"] == [
        "draft",
        "processing",
        "review_pending",
        "published",
        "draft",
    ]
    out["R_stale_version"] = str(listing[docs["R"]]["version"] + 1)
    out["listing"] = list(listing.values())
    return out


CONFLICTS = {  # exit 4, "conflict"
    "submit processing": ["submit", "{P}"],
    "submit review_pending": ["submit", "{R}"],
    "publish draft": ["publish", "{D}"],
    "publish processing": ["publish", "{P}"],
    "publish published": ["publish", "{X}"],
    "publish stale if-version": ["publish", "{R}", "--if-version", "{R_stale_version}"],
    "cancel succeeded task": ["cancel", "{tR}"],
    "cancel cancelled task": ["cancel", "{tC}"],
    "retry queued task": ["retry", "{tP}"],
    "retry succeeded task": ["retry", "{tR}"],
    "retry cancelled task": ["retry", "{tC}"],
    "retry draft document": ["retry", "{D}"],
    "replace processing": ["upload", "{replacement}", "--replace", "{P}"],
    "replace review_pending": ["upload", "{replacement}", "--replace", "{R}"],
}


@pytest.fixture(scope="module")
def conflicts(world: dict) -> dict:
    """Every CONFLICTS command, run concurrently against the world."""
    table = {name: [a.format(**world) for a in args] for name, args in CONFLICTS.items()}
    results = run_table(table, env=world["env"])
    return {"results": results, "listing": kb_json("status", env=world["env"])}


@pytest.mark.parametrize("name", CONFLICTS)
def test_illegal_transition_is_conflict(conflicts: dict, name: str):
    check_error(conflicts["results"][name], 4, "conflict")


def test_refused_transitions_changed_nothing(world: dict, conflicts: dict):
    assert conflicts["listing"] == world["listing"]


# --- 6. failed tasks and their error codes -------------------------------------------------


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory, engine_env, _bytecode_cache) -> dict:
    root = tmp_path_factory.mktemp("failures")
    env = clean_env(KB_HOME=root / "home", **engine_env())
    encrypted = write(root, "encrypted.pdf", make_encrypted_pdf("a secret ledger"))
    kb_json("upload", sample("damaged.pdf"), sample("empty.txt"), encrypted, "--submit", env=env)
    time.sleep(0.05)
    kb_json("upload", sample("faq.txt"), "--submit", env=env)
    result = kb("work", "--drain", "--json", env=env)
    tasks = {line["task_id"]: line["task"] for line in result.records if line["claimed"]}
    docs = kb_json("status", env=env)
    return {
        "env": env,
        "root": root,
        "docs": docs,
        "stderr": result.stderr,
        "tasks": {d["filename"]: tasks[d["latest_task"]["task_id"]] for d in docs},
    }


@pytest.mark.parametrize(
    "filename, error_code, stage",
    [
        ("damaged.pdf", "parse_error", "parse"),
        ("encrypted.pdf", "parse_error", "parse"),
        ("empty.txt", "empty_document", None),
    ],
)
def test_failed_task_has_stable_error_code(failures, filename, error_code, stage):
    task = failures["tasks"][filename]
    assert_task_record(task)
    assert (task["status"], task["error_code"], task["attempt"]) == ("failed", error_code, 1)
    if stage is not None:
        assert task["stage"] == stage
    detail = task["error_detail"]
    assert isinstance(detail, str) and 0 < len(detail) <= 500
    assert "Traceback" not in detail and "/" not in detail and "\\" not in detail
    assert str(failures["root"]) not in detail
    doc = by_filename(failures["docs"])[filename]
    assert doc["status"] == "failed"
    assert doc["latest_task"]["error_code"] == error_code
    assert doc["latest_task"] == task  # the final record of `work` is what status shows


def test_status_lists_newest_first(failures):
    docs = failures["docs"]
    for doc in docs:
        assert_doc_record(doc)
    assert docs[0]["filename"] == "faq.txt"  # uploaded by the later command
    created = [d["created_at"] for d in docs]
    parsed = [dt.fromisoformat(c.replace("Z", "+00:00")) for c in created]
    assert parsed == sorted(parsed, reverse=True)


@pytest.mark.parametrize(
    "filters, expected",
    [
        (["--status", "failed"], ["damaged.pdf", "empty.txt", "encrypted.pdf"]),
        (["--status", "review_pending"], ["faq.txt"]),
        (["--error-code", "parse_error"], ["damaged.pdf", "encrypted.pdf"]),
        (["--error-code", "empty_document"], ["empty.txt"]),
        (["--status", "failed", "--error-code", "empty_document"], ["empty.txt"]),
    ],
    ids=" ".join,  # lists, not sets: every test process must see the same test ids
)
def test_status_filters(failures, filters, expected):
    records = kb_json("status", *filters, env=failures["env"])
    for record in records:
        assert_doc_record(record)
    assert sorted(r["filename"] for r in records) == expected


def test_retry_all_failed_by_error_code():
    tasks = kb_json("upload", sample("damaged.pdf"), sample("empty.txt"), "--submit")
    kb("work", "--drain", "--json")
    ids = {d["filename"]: d["latest_task"]["task_id"] for d in kb_json("status")}
    assert set(ids.values()) == {t["task_id"] for t in tasks}

    [empty] = kb_json("retry", "--all-failed", "--error-code", "empty_document")
    assert empty["task_id"] == ids["empty.txt"]
    assert_queued_fresh(empty, attempt=1)
    assert [d["filename"] for d in kb_json("status", "--status", "failed")] == ["damaged.pdf"]

    [damaged] = kb_json("retry", "--all-failed")
    assert damaged["task_id"] == ids["damaged.pdf"]
    assert_queued_fresh(damaged, attempt=1)
    assert {d["status"] for d in kb_json("status")} == {"processing"}


def test_replace_failed_document_then_retry_succeeds(tmp_path: Path):
    broken = shutil.copy(sample("damaged.pdf"), tmp_path / "manual.pdf")
    [task] = kb_json("upload", broken, "--submit")
    [line] = kb("work", "--json").records
    assert (line["task"]["status"], line["task"]["error_code"]) == ("failed", "parse_error")
    failed = doc_of(task)
    assert failed["status"] == "failed"

    fixed = write(
        tmp_path,
        "manual-fixed.pdf",
        make_pdf(["Operations manual\nThe zeppelin hangar opens at dawn."]),
    )
    [replaced] = kb_json("upload", fixed, "--replace", task["document_id"][:10])
    assert_doc_record(replaced)
    assert (replaced["document_id"], replaced["status"]) == (task["document_id"], "failed")
    assert replaced["revision"] == failed["revision"] + 1
    assert replaced["version"] > failed["version"]
    assert replaced["sha256"] == hashlib.sha256(fixed.read_bytes()).hexdigest()

    [retried] = kb_json("retry", task["document_id"])  # a document id means its latest task
    assert retried["task_id"] == task["task_id"]
    assert_queued_fresh(retried, attempt=1)
    assert doc_of(task)["status"] == "processing"

    result = kb("work", "--worker-id", "w-two", "--json")
    [line] = result.records
    assert (line["task"]["task_id"], line["task"]["status"]) == (task["task_id"], "succeeded")
    assert line["task"]["attempt"] == 2
    assert f"claimed task={task['task_id']} worker=w-two status=running attempt=2" in (
        result.stderr
    )
    done = doc_of(task)
    assert (done["status"], done["revision"]) == ("review_pending", 2)


# --- cancel ----------------------------------------------------------------------------------


def test_cancel_queued_task_then_submit_again():
    [task] = kb_json("upload", sample("faq.txt"), "--submit")
    [cancelled] = kb_json("cancel", task["task_id"])
    assert_task_record(cancelled)
    assert (cancelled["task_id"], cancelled["status"]) == (task["task_id"], "cancelled")
    doc = doc_of(task)
    assert doc["status"] == "draft"
    assert doc["latest_task"]["status"] == "cancelled"

    idle = kb("work", "--json")  # a cancelled task is not claimable
    assert not [line for line in idle.records if line["claimed"]]

    [again] = kb_json("submit", task["document_id"])
    assert_queued_fresh(again)
    assert again["task_id"] != task["task_id"]
    [line] = kb("work", "--json").records
    assert (line["task_id"], line["task"]["status"]) == (again["task_id"], "succeeded")
    assert doc_of(task)["status"] == "review_pending"
