"""`kb publish --all-reviewed`: every review_pending document the caller may publish,
one record each, each its own publish; the rules of `kb publish` for roles and bases."""

from __future__ import annotations

import pytest

from tests.helpers import SAMPLES, db_rows


def ok(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records


def statuses(invoke, token: str | None = None) -> dict[str, str]:
    return {r["filename"]: r["status"] for r in ok(invoke("status", "--json", token=token))}


def test_publishes_every_reviewed_document_and_nothing_else(invoke):
    tasks = ok(
        invoke("upload", *(str(p) for p in sorted(SAMPLES.glob("*.*"))), "--submit", "--json")
    )
    ok(invoke("work", "--drain", "--json"))
    draft = ok(invoke("upload", str(SAMPLES / "faq.txt"), "--json"))[0]

    published = ok(invoke("publish", "--all-reviewed", "--json"))

    reviewed = {
        "handbook.pdf",
        "faq.txt",
        "ingestion-guide-zh.md",
        "release-notes.docx",
        "product-roadmap.pptx",
        "regional-budget.xlsx",
    }
    assert sorted(r["filename"] for r in published) == sorted(reviewed)
    assert {r["status"] for r in published} == {"published"}
    assert all(r["published_revision"] == 1 for r in published)
    assert len({r["document_id"] for r in published}) == len(published)
    by_id = {r["document_id"]: r["status"] for r in ok(invoke("status", "--json"))}
    assert by_id[draft["document_id"]] == "draft"
    failed = [t["document_id"] for t in tasks if by_id[t["document_id"]] == "failed"]
    assert len(failed) == 2  # damaged.pdf and empty.txt stay failed
    events = db_rows("SELECT entity_id FROM audit_events WHERE action = 'publish'")
    assert sorted(e["entity_id"] for e in events) == sorted(r["document_id"] for r in published)
    assert ok(invoke("search", "How long are invoices kept?", "--json"))


@pytest.mark.parametrize("as_json", [True, False])
def test_nothing_to_publish_is_a_note_and_exit_0(invoke, tmp_path, as_json):
    ok(invoke("upload", str(SAMPLES / "faq.txt"), "--json"))  # a draft: not reviewed
    result = invoke("publish", "--all-reviewed", *(["--json"] if as_json else []))
    assert result.code == 0 and result.stdout == ""
    assert "nothing to publish" in result.stderr
    assert statuses(invoke) == {"faq.txt": "draft"}


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("abcdef12", "--all-reviewed"),
        ("--all-reviewed", "--if-version", "3"),
    ],
)
def test_one_id_or_all_reviewed_is_a_usage_error_otherwise(invoke, args):
    ok(invoke("upload", str(SAMPLES / "faq.txt"), "--submit", "--json"))
    ok(invoke("work", "--drain", "--json"))
    result = invoke("publish", *args, "--json")
    assert result.code == 2 and result.error["error"] == "usage"
    assert result.stdout == ""
    assert statuses(invoke) == {"faq.txt": "review_pending"}


def test_roles_and_bases_decide_what_is_published(invoke, tmp_path):
    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    users = {}
    for name, role in [("rita", "reviewer"), ("eddie", "editor")]:
        made = invoke(
            "user", "add", name, "--role", role, "--team", "finance", "--json", token=admin
        )
        users[name] = ok(made)[0]["token"]
    ok(invoke("base", "create", "finance", "--team", "finance", "--json", token=admin))
    ok(invoke("base", "create", "engineering", "--team", "engineering", "--json", token=admin))
    for base, name in [("finance", "faq.txt"), ("engineering", "ingestion-guide-zh.md")]:
        upload = ("upload", str(SAMPLES / name), "--base", base, "--submit", "--json")
        ok(invoke(*upload, token=admin))
    ok(invoke("work", "--drain", "--json", token=admin))

    refused = invoke("publish", "--all-reviewed", "--json", token=users["eddie"])
    assert refused.code == 5 and refused.error["error"] == "forbidden"
    assert set(statuses(invoke, admin).values()) == {"review_pending"}

    published = ok(invoke("publish", "--all-reviewed", "--json", token=users["rita"]))
    assert [r["filename"] for r in published] == ["faq.txt"]
    assert statuses(invoke, admin) == {
        "faq.txt": "published",
        "ingestion-guide-zh.md": "review_pending",  # a base rita may not read
    }
    actors = db_rows("SELECT actor FROM audit_events WHERE action = 'publish'")
    assert [a["actor"] for a in actors] == ["rita"]
