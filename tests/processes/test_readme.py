"""The README's first command block runs as pasted, from a copy of the clone's root,
with real `kb` processes: a newcomer's first screen must not need an id or a file
that is not there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import ON_S3, REPO, SAMPLES, clean_env, kb_env, run_in_process, start_kb
from tests.terminal import ANSI, run_bash_at_a_terminal

# `uv run kb ARGS` as the README writes it, run by this interpreter: what is tested is
# the commands, not uv's resolution of the environment (a fresh .venv per test run).
UV_RUNS_THIS_KB = f"""
uv() {{
  if [ "$1" = run ] && [ "$2" = kb ]; then shift 2; "{sys.executable}" -m kb_cli "$@"
  else echo "the README's blocks run only 'uv run kb': uv $*" >&2; return 99; fi
}}
set -euo pipefail
"""


def first_sh_block(after: str = "") -> str:
    """The README's first sh block (after the heading `after`, when given)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(f"\n{after}\n") if after else 0
    match = re.search(r"^```sh\n(.*?)^```", readme[start:], re.S | re.M)
    assert match, "README.md has no ```sh block"
    return match.group(1)


def test_the_first_block_is_the_whole_loop_without_placeholders():
    block = first_sh_block()
    for verb in ("upload", "work", "publish", "search"):
        assert re.search(rf"^uv run kb {verb}\b", block, re.M), verb
    assert not re.search(r"<[a-z -]+>|\.\.\.|kb_\.\.\.", block)  # no id or token to fill in


def test_the_first_block_runs_as_pasted(tmp_path: Path):
    clone = tmp_path / "clone"
    shutil.copytree(SAMPLES, clone / "sample_docs")
    done = subprocess.run(
        ["bash", "-c", UV_RUNS_THIS_KB + first_sh_block()],
        cwd=clone,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if not ON_S3:  # on PostgreSQL with the objects in S3 nothing is written in a home
        assert (clone / ".kb").is_dir()  # ./.kb of the clone's root, as the README says
    published = re.findall(r'^document \S+ file="([^"]+)" status=published', done.stdout, re.M)
    assert {"handbook.pdf", "faq.txt"} <= set(published)
    assert re.search(r"^\S+ handbook\.pdf rev=1 chunk=0", done.stdout, re.M)  # the search hit
    assert "Traceback" not in done.stderr


def test_every_sample_path_the_pages_name_exists():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {
        (page.name, path.rstrip(".,)"))
        for page in pages
        for path in re.findall(r"sample_docs/[\w./*-]+", page.read_text(encoding="utf-8"))
    }
    assert ("README.md", "sample_docs/*.*") in named
    missing = [(page, path) for page, path in named if not list(REPO.glob(path.rstrip("/")))]
    assert not missing


def test_the_review_walkthrough_runs_as_pasted(tmp_path: Path):
    """Sync, process, publish; change the file; sync and process again; then the
    reviewer's status, show, diff and publish, as the README writes them."""
    done = subprocess.run(
        ["bash", "-c", UV_RUNS_THIS_KB + first_sh_block("## Reviewing before publishing")],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-Twenty-five days a year." in done.stdout and "+Thirty days a year." in done.stdout
    assert "+## Parental" in done.stdout
    assert "change=replaces:1 chunks_added=" in done.stdout  # the list, then the one
    assert re.search(r"^document \S+ .*status=review_pending .* chunks=\d+ ", done.stdout, re.M)
    published = r'^document \S+ file="leave.md" status=published version=\d+ revision=2 '
    assert re.search(published, done.stdout, re.M)
    assert "Traceback" not in done.stderr


def ci_example() -> str:
    """The README's CI job: the ```bash block that syncs `docs` and publishes what it
    added or changed."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [block] = [
        block
        for block in re.findall(r"^```bash\n(.*?)^```", readme, re.S | re.M)
        if "kb sync docs" in block
    ]
    return block


def test_the_ci_example_publishes_what_it_synced_when_run_from_a_terminal(tmp_path: Path):
    """Pasted at a terminal with its output redirected (stderr still the terminal, where
    the live displays go): every record reaches sync.log, so the loop publishes each
    added document and the eval gate passes."""
    topics = {"invoices": "are kept for seven years", "laptops": "are replaced every four years"}
    docs = tmp_path / "docs"
    docs.mkdir()
    questions = []
    for topic, fact in topics.items():
        (docs / f"{topic}.md").write_text(f"# {topic.title()}\n\n{topic.title()} {fact}.\n")
        questions.append(
            json.dumps({"question": f"How long are {topic} kept?", "expected": [f"{topic}.md"]})
        )
    (docs / "questions.jsonl").write_text("\n".join(questions) + "\n")
    assert run_in_process("base", "create", "docs").code == 0
    worker = start_kb("work", "--loop", "--poll-seconds", "0.2")  # a worker elsewhere
    kb = f'kb() {{ "{sys.executable}" -m kb_cli "$@"; }}\n'
    try:
        code, screen = run_bash_at_a_terminal(
            kb + ci_example(), tmp_path / "job.out", tmp_path, kb_env(COLUMNS="80")
        )
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert code == 0, ANSI.sub("", screen)[-3000:]
    log = (tmp_path / "sync.log").read_text().splitlines()
    assert len([line for line in log if line.startswith("added ")]) == len(topics), log
    assert 'added "' not in ANSI.sub("", screen)  # records went to the file, not the screen
    statuses = {d["filename"]: d["status"] for d in run_in_process("status", "--json").records}
    assert statuses == {f"{topic}.md": "published" for topic in topics}
