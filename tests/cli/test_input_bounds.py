"""What one command may ask for (docs/limits.md, "What one command may ask for"): a
number past its range, more --where conditions than a document has keys, a question
file nested too deep or too large, a setting past its range: each is a usage error
(exit 2) whose message names the bound, before a statement could overflow, and changes
nothing; the largest value allowed is answered, on both engines."""

from __future__ import annotations

import functools
import json

import pytest

from tests.helpers import check_error, kb_env, run_in_process

NOTES = {
    "invoices.md": "# Invoices\n\nInvoices are kept for seven years in the archive.\n",
    "travel.md": "# Travel\n\nBook trains for trips under four hours; invoices go to finance.\n",
}
LARGEST_INTEGER = str(2**63 - 1)


def _published(invoke, root):
    """Two published notes with vectors, and a question set about them."""
    paths = []
    for name, text in NOTES.items():
        (root / name).write_text(text)
        paths.append(str(root / name))
    assert invoke("upload", *paths, "--meta", "team=finance", "--submit", "--json").code == 0
    assert invoke("work", "--drain", "--json").code == 0
    assert invoke("publish", "--all-reviewed", "--json").code == 0
    questions = root / "questions.jsonl"
    questions.write_text(_question("How long are invoices kept?") + "\n")
    return str(questions)


def _question(text: str, **more) -> str:
    return json.dumps({"question": text, "expected": ["invoices.md"], **more})


@pytest.fixture(scope="module")
def home(build_home):
    return build_home(_published)


@pytest.fixture
def questions(enter_home, home) -> str:
    """The shared home, entered read-only; its question file."""
    return enter_home(home)


PAST_THE_BOUND = [
    (("search", "invoices", "--limit", "2305843009213693952"), "1000"),
    (("search", "invoices", "--limit", "1001"), "1000"),
    (("search", "invoices", "--per-document", "--limit", "1001"), "1000"),
    (("events", "--since", "99999999999999999999999"), LARGEST_INTEGER),
    (("events", "--since", str(2**63), "--follow"), LARGEST_INTEGER),
    (("eval", "QUESTIONS", "--k", "1001"), "1000"),
    (("eval", "QUESTIONS", "--k", "99999999999999999999999"), "1000"),
]


@pytest.mark.parametrize(
    ("args", "bound"), PAST_THE_BOUND, ids=[" ".join(args) for args, _ in PAST_THE_BOUND]
)
def test_a_number_past_its_range_is_a_usage_error_naming_the_bound(invoke, questions, args, bound):
    args = [questions if arg == "QUESTIONS" else arg for arg in args]
    error = check_error(invoke(*args, "--json"), 2, "usage")
    assert bound in error["message"], error


AT_THE_BOUND = [
    ("search", "invoices", "--limit", "1000"),
    ("search", "invoices", "--per-document", "--limit", "1000"),
    ("search", "invoices", "--mode", "vector", "--limit", "1000"),
    ("search", "invoices", "--mode", "vector", "--per-document", "--limit", "1000"),
    ("events", "--since", LARGEST_INTEGER),
    ("eval", "QUESTIONS", "--k", "1000"),
]


@pytest.mark.parametrize("args", AT_THE_BOUND, ids=" ".join)
def test_the_largest_number_allowed_is_answered(invoke, questions, args):
    """On PostgreSQL a search this deep asked pgvector for more candidates than it may
    keep (hnsw.ef_search above 1,000), a database error."""
    result = invoke(*[questions if arg == "QUESTIONS" else arg for arg in args], "--json")
    assert result.code == 0, result.stderr
    assert result.records or args[0] == "events"


def test_more_where_conditions_than_a_document_has_keys_is_a_usage_error(invoke, questions):
    for command in (("search", "invoices"), ("status",)):
        for count in (33, 1000):  # a thousand made SQLite's expression tree too large
            error = check_error(
                invoke(*command, *["--where", "team=finance"] * count, "--json"), 2, "usage"
            )
            assert f"{count} --where conditions: at most 32" in error["message"], error
        allowed = invoke(*command, *["--where", "team=finance"] * 32, "--json")
        assert allowed.code == 0 and len(allowed.records) == 2, allowed.stderr


def _nested(depth: int) -> object:
    """Lists inside lists, `depth` deep."""
    return functools.reduce(lambda inner, _: [inner], range(depth), 0)


def test_a_question_line_nested_deeper_than_the_bound_is_a_usage_error(invoke, questions, tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")  # Python's JSON parser recursed until it failed
    error = check_error(invoke("eval", str(deep), "--json"), 2, "usage")
    assert "line 1 of 'deep.jsonl' nests arrays and objects more than 32 deep" in error["message"]
    # The question object is one level: 31 lists inside it are read, 32 are not.
    deep.write_text(_question("How long are invoices kept?", notes=_nested(32)) + "\n")
    assert (
        "more than 32 deep"
        in check_error(invoke("eval", str(deep), "--json"), 2, "usage")["message"]
    )
    deep.write_text(_question("How long are invoices kept?", notes=_nested(31)) + "\n")
    result = invoke("eval", str(deep), "--json")
    assert result.code == 0 and result.records[-1]["questions"] == 1, result.stderr


def test_a_question_file_larger_than_the_bound_is_a_usage_error(invoke, questions, tmp_path):
    large = tmp_path / "large.jsonl"
    with large.open("w") as file:
        file.write(_question("How long are invoices kept?") + "\n")
        file.write(" " * (8 * 2**20))
    error = check_error(invoke("eval", str(large), "--json"), 2, "usage")
    assert "larger than 8 MiB" in error["message"], error


SETTINGS_PAST_THE_BOUND = [
    ("KB_BUSY_TIMEOUT", "1e300", "1,000,000"),  # PostgreSQL refused the lock_timeout
    ("KB_RECONNECT_SECONDS", "1000001", "1,000,000"),
    ("KB_CHUNK_BATCH", "99999999999999999999999", "9,223,372,036,854,775,807"),
    ("KB_MAX_CHUNKS", "99999999999999999999999", "9,223,372,036,854,775,807"),
    ("KB_PARSE_MAX_MEMORY_MB", "1e300", "1,048,576"),  # the parse child could not start
    ("KB_VECTOR_FLOOR", "1e300", "from 0 to 1;"),  # numpy warned on stderr
]


@pytest.mark.parametrize(("variable", "value", "bound"), SETTINGS_PAST_THE_BOUND)
def test_a_setting_past_its_range_is_a_usage_error_naming_the_bound(
    questions, variable, value, bound
):
    result = run_in_process("search", "invoices", "--json", env=kb_env(**{variable: value}))
    error = check_error(result, 2, "usage")
    assert error["message"].startswith(variable) and bound in error["message"], error


def test_a_chunk_batch_past_any_sql_integer_deletes_nothing(enter_home, home):
    """The batch is a LIMIT of the statements that delete chunks: one past a 64-bit
    integer failed halfway through a delete."""
    enter_home(home, writes=True)
    before = run_in_process("status", "--json").records
    env = kb_env(KB_CHUNK_BATCH=str(2**63))
    result = run_in_process("delete", before[0]["document_id"], "--yes", "--json", env=env)
    assert "KB_CHUNK_BATCH" in check_error(result, 2, "usage")["message"]
    assert run_in_process("status", "--json").records == before
