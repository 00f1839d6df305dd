"""Count the SQL statements, transactions and id-prefix lookups of a few commands.

    uv run python benchmarks/statements.py

Runs the real CLI in this process on a throwaway SQLite home and traces every
connection it opens (sqlite3's trace callback). Counts, unlike times, do not depend on
the machine: tests/cli/test_statement_counts.py pins the ones that matter.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import STRIPPED, SqlTrace, run_in_process, sql_traced  # noqa: E402


def summary(trace: SqlTrace) -> str:
    return (
        f"{len(trace.statements)} statements, {trace.transactions} transactions, "
        f"{trace.prefix_lookups} prefix lookups"
    )


def kb(env: dict[str, str], *args: str, token: str | None = None):
    run_env = dict(env)
    if token:
        run_env["KB_TOKEN"] = token
    return run_in_process(*args, env=run_env)


def kb_traced(env: dict[str, str], *args: str, token: str | None = None) -> SqlTrace:
    with sql_traced() as trace:
        kb(env, *args, token=token)
    return trace


def measure(home: Path) -> dict[str, SqlTrace]:
    env = {name: value for name, value in os.environ.items() if name not in STRIPPED}
    env["KB_HOME"] = str(home / "open")
    first, second = home / "first.txt", home / "second.txt"
    first.write_text("alpha beta gamma\n", encoding="utf-8")
    second.write_text("delta epsilon\n", encoding="utf-8")
    document = kb(env, "upload", str(first), "--submit", "--json").record["document_id"]
    kb(env, "work", "--json")
    traces = {
        "kb upload FILE --submit": kb_traced(env, "upload", str(second), "--submit"),
        "kb publish PREFIX": kb_traced(env, "publish", document[:8]),
        "kb publish MISSING (open mode)": kb_traced(env, "publish", "ffffffff"),
    }
    env["KB_HOME"] = str(home / "guarded")
    admin = kb(env, "user", "add", "root", "--role", "admin", "--json").record["token"]
    viewer = kb(env, "user", "add", "val", "--role", "viewer", "--json", token=admin)
    kb(env, "base", "create", "team", "--team", "t", token=admin)
    document = kb(
        env, "upload", str(first), "--base", "team", "--submit", "--json", token=admin
    ).record["document_id"]
    kb(env, "work", "--json", token=admin)
    editor = kb(env, "user", "add", "ed", "--role", "editor", "--json", token=admin)
    traces["viewer: kb publish PREFIX (forbidden)"] = kb_traced(
        env, "publish", document[:8], token=viewer.record["token"]
    )
    traces["editor, other base: kb submit PREFIX"] = kb_traced(
        env, "submit", document[:8], token=editor.record["token"]
    )
    traces["admin: kb publish MISSING"] = kb_traced(env, "publish", "ffffffff", token=admin)
    traces["admin: kb publish PREFIX"] = kb_traced(env, "publish", document[:8], token=admin)
    return traces


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kb-statements-") as directory:
        for name, trace in measure(Path(directory)).items():
            print(f"{name:40} {summary(trace)}")
            if "-v" in sys.argv:
                for statement in trace.statements:
                    print("    " + " ".join(statement.split())[:160])


if __name__ == "__main__":
    main()
