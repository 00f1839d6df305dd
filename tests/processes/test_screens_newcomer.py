"""The screens a newcomer reads at 80 columns, with many documents whose names differ
only in the middle and documents of two bases: names kept apart, no line too wide."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from tests.helpers import run_in_process, run_kb, start_kb, wait_until
from tests.terminal import ANSI, run_in_terminal

pytestmark = pytest.mark.display

COLUMNS = 80
PEOPLE = ["alice", "bob", "carol-smith", "dave", "eve-long-name", "frank"]


def lines_of(screen: str) -> list[str]:
    return [part for line in ANSI.sub("", screen).split("\n") for part in line.split("\r")]


def upload(tmp_path, name: str, *flags: str) -> dict:
    path = tmp_path / name
    path.write_text(f"# {name}\n\nSome words about {name}.\n", encoding="utf-8")
    return run_in_process("upload", str(path), *flags, "--json").record  # not on a screen


def test_status_at_80_columns_keeps_different_names_apart_and_names_the_base(tmp_path):
    assert run_in_process("base", "create", "finance").code == 0
    ids = {f"reset-{who}-password.md": "" for who in PEOPLE}
    for name in ids:
        ids[name] = upload(tmp_path, name)["document_id"]
    other = upload(tmp_path, "team-a-content.md", "--base", "finance")["document_id"]
    code, screen = run_in_terminal("status", COLUMNS=str(COLUMNS))
    assert code == 0
    lines = lines_of(screen)
    assert all(cell_len(line) <= COLUMNS for line in lines), lines
    header = next(line for line in lines if " file " in f" {line} ")
    assert " base " in f" {header} "
    rows = {name: next(line for line in lines if i[:8] in line) for name, i in ids.items()}
    files = {row.split()[1] for row in rows.values()}
    assert len(files) == len(PEOPLE), files  # six different names, six different cuts
    assert "finance" in next(line for line in lines if other[:8] in line)


def test_status_limit_shows_the_newest_and_says_how_many_were_left_out(tmp_path):
    ids = [upload(tmp_path, f"note-{n}.md")["document_id"] for n in range(4)]
    code, screen = run_in_terminal("status", "--limit", "2", COLUMNS=str(COLUMNS))
    assert code == 0
    assert "the newest 2 of 4 documents" in screen
    shown = [i for i in ids if i[:8] in screen]
    assert shown == ids[2:]
    plain = run_kb("status", "--limit", "2")
    assert plain.code == 0 and len(plain.stdout.splitlines()) == 2
    assert "2 older documents not shown (--limit)" in plain.stderr


LONG = "Quarterly report for the board of directors, final version 2026.md"


def test_delete_lines_fit_80_columns(tmp_path):
    document = upload(tmp_path, LONG)["document_id"]
    code, screen = run_in_terminal("delete", document, "--yes", COLUMNS=str(COLUMNS))
    assert code == 0, screen
    lines = lines_of(screen)
    assert all(cell_len(line) <= COLUMNS for line in lines), lines
    [line] = [line for line in lines if line.startswith("deleted ")]
    assert document[:8] in line and "Quarterly" in line
    assert "(draft; 0 chunks, 0 tasks)" in line


def test_events_on_a_terminal_name_the_file_and_keep_the_status_whole(tmp_path):
    task = upload(tmp_path, LONG, "--submit")
    code, screen = run_in_terminal("events", COLUMNS=str(COLUMNS))
    assert code == 0
    [line] = [line for line in lines_of(screen) if task["document_id"][:8] in line]
    assert cell_len(line) <= COLUMNS
    assert "Quarterly" in line and line.rstrip().endswith("queued")


def test_history_keeps_its_columns_in_line(tmp_path):
    task = upload(tmp_path, "a.md", "--submit")
    assert run_in_process("work").code == 0
    assert run_in_process("publish", task["document_id"]).code == 0
    code, screen = run_in_terminal("history", task["document_id"], COLUMNS=str(COLUMNS))
    assert code == 0
    rows = [line for line in lines_of(screen) if line[:4].isdigit()]
    assert len(rows) >= 4
    ids = {line.index(task["document_id"][:8]) for line in rows if task["document_id"][:8] in line}
    tasks = {line.index(task["task_id"][:8]) for line in rows if task["task_id"][:8] in line}
    assert len(ids | tasks) == 1, rows  # every entity id starts in the same column


def test_the_document_panel_has_one_status_row_and_a_task_status_row(tmp_path):
    task = upload(tmp_path, "a.md", "--submit")
    code, screen = run_in_terminal("status", task["document_id"], COLUMNS=str(COLUMNS))
    assert code == 0
    labels = [line.strip("│ ").split(" ")[0] for line in lines_of(screen) if "│" in line]
    assert labels.count("status") == 1, labels
    assert any("task status" in line and "queued" in line for line in lines_of(screen))


def test_a_reviewer_s_panel_and_list_say_where_it_comes_from_and_what_it_changes(tmp_path):
    """A synced document with a change waiting: the panel names the base, the path,
    the chunks and the revision it would replace; the list of what waits for review
    says new or how many chunks change, within 80 columns; metadata is shown."""
    folder = tmp_path / "share"
    (folder / "policies").mkdir(parents=True)
    leave = folder / "policies" / "leave.md"
    leave.write_text("# Leave\n\nTwenty-five days a year.\n", encoding="utf-8")
    assert run_in_process("base", "create", "hr").code == 0
    [added, _summary] = run_in_process("sync", str(folder), "--base", "hr", "--json").records
    document_id = added["document_id"]
    assert run_in_process("work", "--drain").code == 0
    assert run_in_process("publish", document_id).code == 0
    leave.write_text("# Leave\n\nThirty days a year.\n\n## Parental\n\nSix months.\n")
    (folder / "travel.md").write_text("# Travel\n\nTrains only.\n", encoding="utf-8")
    assert run_in_process("sync", str(folder), "--base", "hr").code == 0
    assert run_in_process("work", "--drain").code == 0
    code, screen = run_in_terminal("status", document_id, COLUMNS=str(COLUMNS))
    assert code == 0
    rows = {
        line.strip("│ ").split("  ")[0]: line.strip("│ ").split("  ", 1)[-1].strip()
        for line in lines_of(screen)
        if "│" in line
    }
    assert rows["base"] == "hr"
    assert rows["path"].startswith("policies/leave.md (in")
    assert rows["chunks"].startswith("2 (revision 2)"), rows
    assert rows["replaces"].startswith("revision 1, served now: +2 -1 chunks, 0 kept"), rows
    code, screen = run_in_terminal("status", "--status", "review_pending", COLUMNS=str(COLUMNS))
    lines = lines_of(screen)
    assert code == 0 and all(cell_len(line) <= COLUMNS for line in lines), lines
    [changed] = [line for line in lines if document_id[:8] in line]
    assert "+2 -1, 0 kept" in changed
    [new] = [line for line in lines if "travel.md" in line]
    assert " new " in new
    tagged = upload(tmp_path, "memo.md", "--meta", "owner=legal", "--meta", "year=2026")
    code, screen = run_in_terminal("status", tagged["document_id"], COLUMNS=str(COLUMNS))
    assert code == 0 and "owner=legal, year=2026" in screen


def test_status_shows_synced_paths_and_gives_the_name_the_room(tmp_path):
    """Two bases, a task running and one failed, at 80 columns: a synced document is
    shown by its path (policies/README.md and it/README.md differ), a long one cut in
    the middle with its extension kept, and the task's cell gives up its count before
    a name is cut to a stub."""
    source = tmp_path / "share"
    for folder, name in [
        ("policies", "README.md"),
        ("it", "README.md"),
        ("policies", "vpn-setup-guide-for-remote-employees.md"),
        ("it", "big-manual.md"),
    ]:
        (source / folder).mkdir(parents=True, exist_ok=True)
        words = "words and more words. " * (3000 if name == "big-manual.md" else 3)
        (source / folder / name).write_text(f"# {name}\n\n{words}\n", encoding="utf-8")
    assert run_in_process("base", "create", "team").code == 0
    synced = run_in_process("sync", str(source), "--base", "team", "--json").records[:-1]
    ids = {record["path"]: record["document_id"] for record in synced}
    broken = tmp_path / "damaged.pdf"
    broken.write_bytes(b"%PDF-1.4 broken")
    failed = run_in_process("upload", str(broken), "--submit", "--json").record
    assert run_in_process("work", failed["task_id"]).code == 0
    big = ids["it/big-manual.md"]
    worker = start_kb("work", "--drain", "--stage-delay", "0.5")
    try:
        wait_until(
            lambda: (
                run_in_process("status", big, "--json").record["latest_task"]["status"] == "running"
            ),
            timeout=60,
        )
        code, screen = run_in_terminal("status", COLUMNS=str(COLUMNS))
    finally:
        worker.kill()
        worker.communicate(timeout=60)
    assert code == 0
    lines = lines_of(screen)
    assert all(cell_len(line) <= COLUMNS for line in lines), lines
    rows = {path: next(line for line in lines if i[:8] in line) for path, i in ids.items()}
    assert rows["policies/README.md"].split()[1] == "policies/README.md"
    assert rows["it/README.md"].split()[1] == "it/README.md"
    assert "running" in rows["it/big-manual.md"]
    vpn = rows["policies/vpn-setup-guide-for-remote-employees.md"].split()[1]
    assert vpn.startswith("policies/vpn") and "…" in vpn and vpn.endswith("es.md"), vpn
    assert cell_len(vpn) >= 20  # not a stub beside a task's count
    [failed_row] = [line for line in lines if failed["document_id"][:8] in line]
    assert "parse_error" in failed_row and "default" in failed_row
    code, screen = run_in_terminal("status", "--limit", "2", COLUMNS=str(COLUMNS))
    limited = lines_of(screen)
    assert code == 0 and "the newest 2 of 5 documents (--limit)" in screen
    assert [line for line in limited if failed["document_id"][:8] in line]
    assert all(cell_len(line) <= COLUMNS for line in limited), limited


def _tokens(screen: str) -> set[str]:
    return {token for line in lines_of(screen) for token in line.split()}


def test_sync_and_reparse_at_80_columns_keep_words_whole_and_ids_short(tmp_path):
    """On a terminal: short ids, long paths cut, the summary and reasons wrapped
    between words, a dry run in the conditional; piped and --json keep whole ids and
    the action names."""
    source = tmp_path / "share"
    (source / "guides").mkdir(parents=True)
    long_path = "guides/setting-up-the-vpn-on-a-laptop-at-home-or-when-travelling-abroad.md"
    for path in ("README.md", long_path):
        (source / path).write_text(f"# {path}\n\nSome words.\n", encoding="utf-8")
    assert run_in_process("base", "create", "team").code == 0
    args = ("sync", str(source), "--base", "team")

    code, screen = run_in_terminal(*args, "--dry-run", COLUMNS=str(COLUMNS))
    assert code == 0
    lines = lines_of(screen)
    assert all(cell_len(line) <= COLUMNS for line in lines), lines
    assert 'would add "README.md"' in lines and not any(line.startswith("added ") for line in lines)
    [cut] = [line for line in lines if line.startswith('would add "guides/')]
    assert "…" in cut and cut.endswith('abroad.md"')
    assert {"would", "sync", "into", "base", "team:", "added=2", "failed=0"} <= _tokens(screen)
    piped = run_kb(*args, "--dry-run")
    assert piped.stdout.splitlines()[:2] == ['would add "README.md"', f'would add "{long_path}"']
    assert {r.get("action") for r in run_kb(*args, "--dry-run", "--json").records} == {
        "added",
        None,  # the summary
    }

    code, screen = run_in_terminal(*args, COLUMNS=str(COLUMNS))
    assert code == 0
    assert all(cell_len(line) <= COLUMNS for line in lines_of(screen)), screen
    counts = ["added=2", "changed=0", "unchanged=0", "missing=0", "skipped=0", "failed=0"]
    assert {"synced", "into", "base", "team:", *counts} <= _tokens(screen)
    ids = [document["document_id"] for document in run_in_process("status", "--json").records]
    for document_id in ids:
        assert f"document={document_id[:8]}" in screen and document_id not in screen
    again = run_kb(*args)
    assert all(any(i in line for i in ids) for line in again.stdout.splitlines()[:2])

    readme = next(i for i in ids if i[:8] in screen.split('"README.md"')[1][:30])
    assert run_in_process("cancel", readme).code == 0  # a draft: parsed again
    code, screen = run_in_terminal("reparse", "--base", "team", "--dry-run", COLUMNS="80")
    assert code == 0
    lines = lines_of(screen)
    assert all(cell_len(line) <= COLUMNS for line in lines), lines
    assert f"would queue {readme[:8]} README.md (draft)" in lines
    planned = run_in_process("reparse", "--base", "team", "--dry-run", "--json").records
    [left] = [item for item in planned if item["reason"]]
    assert any(line.startswith(f"would leave {left['document_id'][:8]} ") for line in lines)
    assert not any(i in screen for i in ids)  # short ids only
    assert set(left["reason"].split()) <= _tokens(screen), screen  # wrapped between words
    piped = run_kb("reparse", "--base", "team", "--dry-run")
    assert f"would queue {readme} README.md (draft)" in piped.stdout.splitlines()
