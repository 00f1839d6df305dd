"""What people see: live progress on a terminal, clean lines in pipes, the demo."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import kb_env, run_in_process, run_kb
from tests.terminal import ANSI, run_in_terminal

pytestmark = pytest.mark.display

STAGES = ("download", "parse", "embedding", "indexing", "finalizing")


def submit(tmp_path, name: str = "a.md", text: str = "# Title\n\nSome words to index.\n"):
    path = tmp_path / name
    path.write_text(text)
    return run_in_process("upload", str(path), "--submit", "--json").record  # not on a screen


def test_work_on_a_terminal_shows_live_stage_bars(tmp_path):
    task = submit(tmp_path)
    code, screen = run_in_terminal("work", "--worker-id", "A", "--stage-delay", "0.05")
    assert code == 0
    assert "\x1b[" in screen  # rich drew it
    text = ANSI.sub("", screen)
    for stage in STAGES:
        assert stage in text
    assert "claimed" in text and task["task_id"][:8] in text and "attempt 1" in text
    assert "1/1" in text and "succeeded" in text


def test_work_failure_on_a_terminal_shows_the_error(tmp_path):
    path = tmp_path / "bad.pdf"
    path.write_bytes(b"%PDF-1.4 broken")
    run_in_process("upload", str(path), "--submit")
    code, screen = run_in_terminal("work", "--worker-id", "A")
    text = ANSI.sub("", screen)
    assert code == 0 and "failed" in text and "parse_error" in text


def test_work_in_a_pipe_prints_exactly_the_contract_lines(tmp_path):
    task = submit(tmp_path)
    result = run_kb("work", "--worker-id", "A")
    assert result.code == 0
    assert "\x1b" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"claimed task={task['task_id']} worker=A status=running attempt=1"
    progress = [line for line in lines if line.startswith("stage=")]
    assert all(re.fullmatch(r"stage=[a-z]+ \d+/\d+", line) for line in progress)
    stages_in_order = list(dict.fromkeys(line.split()[0][6:] for line in progress))
    assert stages_in_order == list(STAGES)
    assert "stage=finalizing 1/1" in progress


@pytest.mark.parametrize("variable", [{"CI": "true"}, {"NO_COLOR": "1"}])
def test_ci_or_no_color_means_plain_output_even_on_a_terminal(tmp_path, variable):
    submit(tmp_path)
    code, screen = run_in_terminal("work", **variable)
    assert code == 0
    assert "\x1b[" not in screen and "claimed task=" in screen


def test_status_wait_follows_another_process_live(tmp_path):
    task = submit(tmp_path, text="# T\n\n" + "\n\n".join(f"para {i} " * 40 for i in range(6)))
    worker = subprocess.Popen(
        [sys.executable, "-m", "kb_cli", "work", "--stage-delay", "0.1"],
        env=kb_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    code, screen = run_in_terminal("status", task["task_id"], "--wait", "--timeout", "60")
    worker.wait(timeout=60)
    text = ANSI.sub("", screen)
    assert code == 0 and "waiting" in text and "embedding" in text and "succeeded" in text


def test_status_table_on_a_terminal(tmp_path):
    submit(tmp_path)
    code, screen = run_in_terminal("status")
    text = ANSI.sub("", screen)
    assert code == 0
    for header in ("id", "file", "document", "task", "stage", "progress", "attempt", "age"):
        assert header in text
    assert "a.md" in text and "processing" in text and "queued" in text


def test_demo_runs_to_the_end_without_a_terminal():
    result = run_kb("demo", timeout=120)
    assert result.code == 0, result.stderr
    assert "\x1b" not in result.stdout
    summary = "\n".join(line for line in result.stdout.splitlines() if line.startswith("summary: "))
    for outcome in (
        "succeeded",
        "failed with parse_error",
        "replaced and retried",
        "cancelled mid-run",
        "published",
        "found by search",
    ):
        assert outcome in summary, outcome
    assert "won the claim" in result.stdout and "missed" in result.stdout
    [cancel] = [line for line in result.stdout.splitlines() if line.startswith("cancel:")]
    assert "faq.txt: cancelled mid-run, at its " in cancel and cancel.endswith(" stage")
    # Questions answered by hybrid search: each found by its words and its meaning.
    lines = result.stdout.splitlines()
    [english] = [
        line for line in lines if line.startswith("search: 'How long do we keep invoices?': ")
    ]
    assert "handbook.pdf" in english and "words #" in english and "meaning #" in english
    [chinese] = [
        line for line in lines if line.startswith("search: '文档什么时候才能被搜索到？': ")
    ]
    # A Chinese question ranks by words while some chunk holds its words (README).
    assert "ingestion-guide-zh.md" in chinese and "words #1" in chinese
    # A slide deck and a spreadsheet are ingested too; a slide's notes answer a question.
    for deck_or_sheet in ("product-roadmap.pptx", "regional-budget.xlsx"):
        assert f"{deck_or_sheet}: document=published" in summary, deck_or_sheet
    [slides] = [
        line for line in lines if line.startswith("search: 'When does the offline index ship?': ")
    ]
    assert "product-roadmap.pptx chunk 1" in slides


def test_demo_json_is_json_lines_with_a_summary():
    result = run_kb("demo", "--json", timeout=120)
    assert result.code == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    summary = [record for record in records if record["step"] == "summary"]
    assert {row["filename"] for row in summary} >= {"damaged.pdf", "faq.txt"}
    races = [record for record in records if record["step"] == "race"]
    assert all(record["winner"] != record["loser"] for record in races)


def test_a_bulk_upload_draws_a_bar_on_a_terminal_and_nothing_more_in_a_pipe(tmp_path):
    paths = []
    for i in range(30):
        path = tmp_path / f"note-{i:02d}.txt"
        path.write_text(f"Note {i} about invoices.\n")
        paths.append(str(path))
    code, screen = run_in_terminal("upload", *paths[:15], "--base", "default")
    assert code == 0 and "storing files" not in ANSI.sub("", screen)  # a few: no bar
    code, screen = run_in_terminal("upload", *paths)
    assert code == 0
    text = ANSI.sub("", screen)
    assert "storing files" in text and "100%" in text
    assert text.count("note-") >= 30  # the records are still printed, one per file
    piped = run_kb("upload", *paths, "--submit", "--json")
    assert piped.code == 0 and "storing files" not in piped.stderr
    assert "\x1b[" not in piped.stderr + piped.stdout
    assert [json.loads(line)["status"] for line in piped.stdout.splitlines()] == ["queued"] * 30
