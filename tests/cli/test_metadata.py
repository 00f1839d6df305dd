"""Document metadata: `kb upload --meta` checked and bounded, shown on records, audited;
`kb search --where` and `kb status --where` filter before ranking, on both engines."""

from __future__ import annotations

import pytest

from kb_cli import metadata
from tests.helpers import db_rows


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def upload(invoke, path, *meta: str, submit: bool = True) -> dict:
    args = [arg for pair in meta for arg in ("--meta", pair)]
    return ok(invoke("upload", str(path), *args, *(["--submit"] if submit else []), "--json"))[0]


def test_metadata_is_stored_shown_and_audited(invoke, tmp_path):
    path = tmp_path / "q3.md"
    path.write_text("# Q3\n\nrevenue grew\n", encoding="utf-8")
    record = upload(invoke, path, "team=finance", "year=2026", "path=reports/q3.md", submit=False)
    assert record["meta"] == {"team": "finance", "year": "2026", "path": "reports/q3.md"}
    shown = ok(invoke("status", record["document_id"], "--json"))[0]
    assert shown["meta"] == record["meta"]
    trail = ok(invoke("history", record["document_id"], "--json"))
    [event] = [event for event in trail if event["action"] == "meta"]
    assert event["detail"] == "path=reports/q3.md, team=finance, year=2026"
    # --replace sets keys, keeps the others, and is audited too.
    replaced = ok(
        invoke(
            "upload", str(path), "--replace", record["document_id"], "--meta", "year=2027", "--json"
        )
    )[0]
    assert replaced["meta"] == {"team": "finance", "year": "2027", "path": "reports/q3.md"}
    assert [
        e["detail"]
        for e in ok(invoke("history", record["document_id"], "--json"))
        if e["action"] == "meta"
    ][-1] == "year=2027"
    # A plain upload has empty metadata, not null.
    other = tmp_path / "plain.md"
    other.write_text("plain\n", encoding="utf-8")
    assert upload(invoke, other, submit=False)["meta"] == {}


@pytest.mark.empty_database
@pytest.mark.parametrize(
    "pair",
    [
        "noequals",
        "=value",
        "1key=v",
        "bad key=v",
        "k" * (metadata.MAX_KEY + 1) + "=v",
        "key=" + "v" * (metadata.MAX_VALUE + 1),
        "key=line\nbreak",
    ],
)
def test_bad_metadata_is_refused_and_nothing_is_stored(invoke, tmp_path, pair):
    path = tmp_path / "a.md"
    path.write_text("a\n", encoding="utf-8")
    refused = invoke("upload", str(path), "--meta", pair, "--json")
    assert refused.code == 2 and refused.error["error"] == "usage", refused.stderr
    listing = invoke("status", "--json")  # nothing stored: not even a knowledge base
    assert listing.code == 2 and "no knowledge base in" in listing.error["message"]


def test_too_many_keys_are_refused(invoke, tmp_path):
    path = tmp_path / "a.md"
    path.write_text("a\n", encoding="utf-8")
    pairs = [arg for i in range(metadata.MAX_KEYS + 1) for arg in ("--meta", f"k{i}=v")]
    refused = invoke("upload", str(path), *pairs, "--json")
    assert refused.code == 2 and "at most" in refused.error["message"]


def test_one_document_per_path_in_a_base(invoke, tmp_path):
    """The database's unique index: a second document with the same `path` in the same
    base is a conflict, and stores nothing; another base may have it."""
    path = tmp_path / "a.md"
    path.write_text("a\n", encoding="utf-8")
    first = upload(invoke, path, "path=docs/a.md", submit=False)
    refused = invoke("upload", str(path), "--meta", "path=docs/a.md", "--json")
    assert refused.code == 4 and refused.error["error"] == "conflict"
    assert [r["document_id"] for r in ok(invoke("status", "--json"))] == [first["document_id"]]
    ok(invoke("base", "create", "other", "--json"))
    ok(invoke("upload", str(path), "--meta", "path=docs/a.md", "--base", "other", "--json"))
    rows = db_rows("SELECT count(*) AS n FROM documents")
    assert rows[0]["n"] == 2


def test_where_filters_before_ranking(invoke, tmp_path, monkeypatch):
    """Sixty documents that match the query far better than the one finance document
    fill every candidate place (50); the filter is inside the candidate statements, so
    the finance document is still found, alone, in every mode."""
    strong = []
    for i in range(60):
        path = tmp_path / f"eng{i}.md"
        path.write_text(f"# Invoices {i}\n\ninvoice invoice invoice retention {i}\n", "utf-8")
        strong.append(path)
    weak = tmp_path / "fin.md"
    weak.write_text("# Policy\n\nThe invoice is kept with many other unrelated words.\n", "utf-8")
    ok(invoke("upload", *map(str, strong), "--meta", "team=eng", "--submit", "--json"))
    upload(invoke, weak, "team=fin", "path=finance/policy.md")
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", "--all-reviewed", "--json"))
    for mode in ("lexical", "vector", "hybrid"):
        found = ok(invoke("search", "invoice", "--where", "team=fin", "--mode", mode, "--json"))
        assert [hit["filename"] for hit in found] == ["fin.md"], mode
        unfiltered = ok(invoke("search", "invoice", "--mode", mode, "--limit", "50", "--json"))
        assert "fin.md" not in {hit["filename"] for hit in unfiltered} or mode != "lexical"
    by_prefix = ok(invoke("search", "invoice", "--where", "path^=finance/", "--json"))
    assert {hit["filename"] for hit in by_prefix} == {"fin.md"}
    assert ok(invoke("search", "invoice", "--where", "path^=Finance/", "--json")) == []
    both = ok(invoke("search", "invoice", "--where", "team=fin", "--where", "path^=x", "--json"))
    assert both == []
    listed = ok(invoke("status", "--where", "team=eng", "--json"))
    assert len(listed) == 60 and {r["meta"]["team"] for r in listed} == {"eng"}
    assert [r["filename"] for r in ok(invoke("status", "--where", "path^=fin", "--json"))] == [
        "fin.md"
    ]


def test_where_is_checked(invoke):
    refused = invoke("status", "--where", "team", "--json")
    assert refused.code == 2 and "KEY=VALUE" in refused.error["message"]
    refused = invoke("search", "x", "--where", "bad key=1", "--json")
    assert refused.code == 2
