"""Every screen a person reads, captured on a pseudo-terminal at 80 and 200 columns:
no row wrapped, no UUID cut, the file named, failures in red."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from tests.helpers import run_in_process, start_kb, wait_until
from tests.terminal import ANSI, run_in_terminal

pytestmark = pytest.mark.display

WIDTHS = (80, 200)
LONG_NAME = "Quarterly report for the board of directors, final version 2026.md"
CHINESE_NAME = "员工手册（二零二六年版）.md"


def lines_of(screen: str) -> list[str]:
    """The lines drawn; a live display redraws a line after a carriage return."""
    return [part for line in ANSI.sub("", screen).split("\n") for part in line.split("\r")]


def assert_fits(screen: str, columns: int) -> list[str]:
    lines = lines_of(screen)
    too_wide = [line for line in lines if cell_len(line) > columns]
    assert not too_wide, too_wide
    return lines


def upload(tmp_path, name: str, text: str = "# Title\n\nSome words to index.\n", *flags: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return run_in_process("upload", str(path), *flags, "--json").record  # not on a screen


@pytest.mark.parametrize("columns", WIDTHS)
def test_status_table_keeps_one_row_per_document(tmp_path, columns):
    ids = [upload(tmp_path, name, "# T\n\ntext\n")["document_id"] for name in ("a.md",)]
    ids.append(upload(tmp_path, LONG_NAME, "# T\n\ntext\n", "--submit")["document_id"])
    ids.append(upload(tmp_path, CHINESE_NAME, "# 标题\n\n正文。\n")["document_id"])
    code, screen = run_in_terminal("status", COLUMNS=str(columns))
    assert code == 0
    lines = assert_fits(screen, columns)
    for document_id in ids:
        [row] = [line for line in lines if document_id[:8] in line]  # one row, never two
        assert "processing" in row or "draft" in row
    [long_row] = [line for line in lines if ids[1][:8] in line]
    assert "Quarterly r" in long_row and "queued" in long_row
    if columns >= 200:
        assert LONG_NAME in long_row  # room enough: nothing cut
    else:
        assert "…" in long_row  # cut, not wrapped
    [chinese_row] = [line for line in lines if ids[2][:8] in line]
    assert "员工手册" in chinese_row
    widths = {cell_len(line) for line in lines if any(i[:8] in line for i in ids)}
    assert len(widths) == 1  # rows of Chinese and Latin names align


@pytest.mark.parametrize("columns", WIDTHS)
def test_single_records_are_panels_with_whole_ids(tmp_path, columns):
    task = upload(tmp_path, LONG_NAME, "# T\n\ntext\n", "--submit")
    for ref, title in ((task["task_id"], "task"), (task["document_id"], "document")):
        code, screen = run_in_terminal("status", ref, COLUMNS=str(columns))
        assert code == 0
        lines = assert_fits(screen, columns)
        assert any(f"{title} {ref}" in line for line in lines), screen
        assert "status=" not in screen  # not the key=value lines meant for pipes
    code, screen = run_in_terminal("history", task["document_id"], COLUMNS=str(columns))
    lines = assert_fits(screen, columns)
    assert code == 0 and any("submit" in line and "draft → processing" in line for line in lines)


@pytest.mark.parametrize("columns", WIDTHS)
def test_worker_screen_names_the_file_and_does_not_repeat_the_record(tmp_path, columns):
    upload(tmp_path, CHINESE_NAME, "# 标题\n\n正文。\n", "--submit")
    code, screen = run_in_terminal("work", "--worker-id", "A", COLUMNS=str(columns))
    assert code == 0
    text = ANSI.sub("", screen)
    assert "claimed" in text and "员工手册" in text and "rev 1" in text and "succeeded" in text
    assert "status=succeeded" not in text and "document=" not in text
    assert_fits(screen, columns)


def test_idle_loop_worker_keeps_one_status_line(tmp_path):
    upload(tmp_path, LONG_NAME, "# T\n\ntext\n", "--submit")
    code, screen = run_in_terminal(
        "work", "--loop", "--poll-seconds", "0.05", interrupt_on="waiting since", COLUMNS="80"
    )  # then 20 polls
    assert code == 0
    assert "no claimable task" not in screen
    lines = assert_fits(screen, 80)
    idle = [line for line in lines if "waiting since" in line]
    assert idle and all("1 done" in line and "Ctrl-C to stop" in line for line in idle)
    assert "stopped: 1 done" in ANSI.sub("", screen)


def test_a_long_file_name_keeps_the_claim_on_one_line(tmp_path):
    upload(tmp_path, LONG_NAME, "# T\n\ntext\n", "--submit")
    code, screen = run_in_terminal("work", "--worker-id", "A", COLUMNS="80")
    assert code == 0
    lines = assert_fits(screen, 80)
    [claim] = [line for line in lines if line.startswith("claimed")]
    assert "Quarterly" in claim and "…" in claim and claim.endswith("worker A attempt 1")
    assert "/s" not in ANSI.sub("", screen)  # one chunk in no time is no rate


def test_ctrl_c_leaves_no_progress_drawn_after_released(tmp_path):
    upload(tmp_path, "a.md", "# T\n\ntext\n", "--submit")
    code, screen = run_in_terminal(
        "work", "--loop", "--stage-delay", "1", interrupt_on="download", COLUMNS="80"
    )
    assert code == 0
    text = ANSI.sub("", screen)
    after = text[text.index("released task") :]
    assert "━" not in after and "download" not in after, after  # no stale bars below it
    assert_fits(screen, 80)


def _file_cells(lines: list[str], ids: list[str]) -> list[str]:
    """The file cell of each document's row, in the order of `ids`."""
    return [line.split()[1] for i in ids for line in lines if line.lstrip().startswith(i[:8])]


def test_status_columns_fit_and_keep_names_apart_while_work_runs(tmp_path):
    """Columns are sized from what they show (issue: a mostly blank task column took
    the file's room), so a table printed while a task runs may differ from one printed
    after; both fit and keep the two names apart."""
    names = [f"big-manual-{part}-edition-2026.md" for part in ("one", "two")]
    text = "# T\n\n" + "words and more words. " * 400
    tasks = [upload(tmp_path, name, text, "--submit") for name in names]
    ids = [task["document_id"] for task in tasks]
    # The first document done at once, the second running slowly while the table is drawn
    # (one worker drained both, the first as slowly: four seconds spent on nothing).
    assert run_in_process("work", tasks[0]["task_id"]).code == 0
    worker = start_kb("work", "--drain", "--stage-delay", "0.4")
    try:
        wait_until(
            lambda: (
                run_in_process("status", ids[1], "--json").record["latest_task"]["status"]
                == "running"
            ),
            timeout=60,
        )
        code, running = run_in_terminal("status", COLUMNS="80")
    finally:
        worker.communicate(timeout=120)
    code_after, idle = run_in_terminal("status", COLUMNS="80")
    assert code == code_after == 0
    running_lines, idle_lines = assert_fits(running, 80), assert_fits(idle, 80)
    assert any("running" in line for line in running_lines)
    assert len(set(_file_cells(running_lines, ids))) == 2  # told apart
    assert len(set(_file_cells(idle_lines, ids))) == 2


def test_task_tables_and_panels_name_the_file(tmp_path):
    paths = []
    for year in (2024, 2025, 2026):
        path = tmp_path / LONG_NAME.replace("2026", str(year))
        path.write_text(f"# T\n\n{year}\n")
        paths.append(str(path))
    code, screen = run_in_terminal("upload", *paths, "--submit", COLUMNS="80")
    assert code == 0
    lines = assert_fits(screen, 80)
    assert any(line.startswith("3 tasks") for line in lines)
    rows = [line for line in lines if "queued" in line]
    assert len(rows) == 3 and all("Quarterly" in row for row in rows)
    assert len({row.split("queued")[0].split(maxsplit=1)[1] for row in rows}) == 3
    task = run_in_process("status", "--json").records[0]["latest_task"]
    code, screen = run_in_terminal("cancel", task["task_id"], COLUMNS="80")
    lines = assert_fits(screen, 80)
    assert code == 0 and any(line.lstrip("│ ").startswith("file") for line in lines)


def test_errors_and_warnings_wrap_between_words(tmp_path):
    code, screen = run_in_terminal("status", "--no-such-option", COLUMNS="80")
    assert code == 2
    message = run_in_process("status", "--no-such-option", "--json").error["message"]
    _assert_words_whole(screen, message)
    note = tmp_path / LONG_NAME
    note.write_text("words")
    code, screen = run_in_terminal("upload", str(note), str(note), COLUMNS="80")
    assert code == 0
    assert "warning" in screen
    _assert_words_whole(screen, LONG_NAME)


def _assert_words_whole(screen: str, message: str) -> None:
    lines = assert_fits(screen, 80)
    assert len([line for line in lines if line.strip()]) > 1  # long enough to wrap
    tokens = {token for line in lines for token in line.split()}
    assert not [word for word in message.split() if word not in tokens], screen


@pytest.mark.parametrize("columns", WIDTHS)
def test_wait_on_a_failing_task_shows_the_failure_and_exits_8(tmp_path, columns):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4 broken")
    task = run_in_process("upload", str(path), "--submit", "--json").record
    worker = start_kb("work", "--stage-delay", "0.2")
    code, screen = run_in_terminal("status", task["task_id"], "--wait", COLUMNS=str(columns))
    worker.communicate(timeout=60)
    assert code == 8
    text = ANSI.sub("", screen)
    assert "broken.pdf" in text and "✗ parse" in text
    assert "parse_error at parse" in text and "\x1b[31m" in screen  # red
    assert "kb retry" in text  # what to do next
    assert_fits(screen, columns)


def test_no_hits_say_so_on_a_terminal(tmp_path):
    upload(tmp_path, "a.md", "# T\n\nzebras everywhere\n", "--submit")
    run_in_process("work")
    code, screen = run_in_terminal("search", "zebras", COLUMNS="80")
    assert code == 0
    assert "no hits" in screen and "published" in screen  # the draft is not served


@pytest.mark.parametrize("columns", [80])
def test_demo_summary_fits(columns):
    code, screen = run_in_terminal("demo", COLUMNS=str(columns), timeout=120)
    assert code == 0
    lines = assert_fits(screen, columns)
    for name in ("damaged.pdf", "faq.txt", "handbook.pdf"):
        assert any(line.lstrip("│ ").startswith(name) for line in lines), name


def test_control_characters_in_file_names_are_escaped_on_a_terminal(tmp_path):
    name = "evil\x1b[31mred\x1b]0;title\x07\nforged row.txt"
    (tmp_path / name).write_text("words")
    assert run_in_process("upload", str(tmp_path / name), "--json").code == 0
    code, screen = run_in_terminal("status")
    assert code == 0
    assert "\x1b[31mred" not in screen and "\x1b]0;" not in screen
    text = ANSI.sub("", screen)
    assert "\\x1b[31mred" in text and "\\n" in text
    # the newline did not start a row of its own: no line begins with the forged text
    assert not [line for line in text.splitlines() if line.lstrip("│ ").startswith("forged")]


def test_a_right_to_left_override_in_a_file_name_is_escaped_on_a_terminal(tmp_path):
    """U+202E turns what follows it around on screen: "invoice" RLO "gpj.md" reads
    "invoicedm.jpg". Tables, panels, messages and plain lines on a terminal show it as
    an escape, as they show ESC."""
    name = "invoice\u202egpj.md"
    document = upload(tmp_path, name, "# Invoices\n\nInvoices are kept for seven years.\n")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(f'{{"question": "invoices \u202ekept", "expected": ["{name}"]}}\n')
    (tmp_path / "bad\u202egpj.exe").write_text("not a document")
    screens = [
        run_in_terminal("status"),
        run_in_terminal("status", document["document_id"]),
        run_in_terminal("upload", str(tmp_path / "bad\u202egpj.exe")),
        run_in_terminal("eval", str(questions)),
    ]
    assert [code for code, _screen in screens] == [0, 0, 6, 0]
    for _code, screen in screens:
        assert "\u202e" not in screen
        assert "\\u202e" in ANSI.sub("", screen)


def test_events_on_a_terminal_fit_one_line_each(tmp_path):
    task = upload(tmp_path, "note.md", "# Note\n\nSome words to index.\n", "--submit")
    assert run_in_process("work", "--json").code == 0
    events = run_in_process("events", "--json").records
    assert len(events) == 3  # queued, succeeded, review_pending
    code, screen = run_in_terminal("events", COLUMNS="80")
    lines = [line for line in assert_fits(screen, 80) if line.strip()]
    assert code == 0 and len(lines) == len(events)
    for line, event in zip(lines, events, strict=True):
        assert line.startswith(f"{event['event_id']} ") and event["type"] in line
        assert task["document_id"][:8] in line
