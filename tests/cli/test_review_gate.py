"""Revisions, publish as a pointer swap, search in English and Chinese, roles, audit."""

from __future__ import annotations

import json

import pytest

from tests.helpers import db_rows, hits, ingest, publish

CHINESE = "知识库入库流程很重要。文档上传后成为草稿，审核人员发布之后才能被检索到。"


# --- search -------------------------------------------------------------------------


def _published(invoke, root):
    english = ingest(
        invoke,
        root,
        "policy.md",
        "# Retention\n\nThe retention policy "
        "keeps invoices for seven years.\n\nBackups run nightly.",
    )
    chinese = ingest(invoke, root, "guide.md", f"# 指南\n\n{CHINESE}")
    unpublished = ingest(invoke, root, "secret.txt", "The zanzibar protocol is secret.")
    publish(invoke, english["document_id"])
    publish(invoke, chinese["document_id"])
    return english, chinese, unpublished


@pytest.fixture(scope="module")
def published_home(build_home):
    return build_home(_published)


@pytest.fixture
def published(enter_home, published_home):
    """An English and a Chinese document published, a third processed but not: the
    search tests only read it."""
    return enter_home(published_home)


@pytest.mark.parametrize(
    ("query", "which"),
    [
        ("retention policy", 0),  # an English phrase
        ("policies", 0),  # stemming finds the singular
        ("INVOICES seven", 0),
        ("入库", 1),  # two Chinese characters: shorter than a trigram
        ("知识库", 1),  # three
        ("审核人员发布", 1),  # six
        ("How long are invoices retained?", 0),  # a question: ranked, not filtered
        ("审核人员什么时候发布文档？", 1),
        ('"seven years" invoices', 0),  # a quoted phrase must match exactly
    ],
)
def test_search_finds_published_text(invoke, published, query, which):
    found = hits(invoke, query)
    assert found, query
    assert found[0]["document_id"] == published[which]["document_id"]
    first = found[0]
    assert set(first) >= {"document_id", "filename", "revision", "chunk_index", "score", "text"}
    assert first["revision"] == 1 and "[" in first["snippet"]


@pytest.mark.parametrize("query", ['"retention" AND (policy*) -x: NEAR(', '")(*', "a:b OR c"])
def test_search_treats_fts_syntax_as_text(invoke, published, query):
    result = invoke("search", query, "--json")
    assert result.code == 0 and "Traceback" not in result.stderr


def test_search_ranks_any_term_and_requires_quoted_phrases(invoke, published):
    english, chinese, _ = published
    both = {hit["document_id"] for hit in hits(invoke, "草稿 retention")}
    assert both == {english["document_id"], chinese["document_id"]}  # any term may match
    assert hits(invoke, '"seven nights" invoices') == []  # no chunk holds the phrase
    assert hits(invoke, '"Retention Policy"')[0]["document_id"] == english["document_id"]


def test_search_hides_unpublished_documents(invoke, published):
    assert hits(invoke, "zanzibar") == []


def test_empty_query_is_a_usage_error(invoke, published):
    result = invoke("search", "   ", "--json")
    assert result.code == 2 and result.error["error"] == "usage"


def test_search_limit_and_order(invoke, tmp_path):
    for i in range(4):
        task = ingest(invoke, tmp_path, f"n{i}.txt", "ledger " * (i + 1) + "filler text")
        publish(invoke, task["document_id"])
    found = hits(invoke, "ledger")
    assert len(found) == 4
    assert [hit["score"] for hit in found] == sorted((hit["score"] for hit in found), reverse=True)
    assert len(invoke("search", "ledger", "--limit", "2", "--json").records) == 2


# --- revisions -----------------------------------------------------------------------


def test_replacing_a_published_document_keeps_the_old_revision_served(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "v1.txt", "The original wording mentions aardvark.")
    document_id = task["document_id"]
    publish(invoke, document_id)
    new = tmp_path / "v2.txt"
    new.write_text("The new wording mentions pangolin.")
    replaced = invoke("upload", str(new), "--replace", document_id, "--json").record
    assert replaced["status"] == "draft" and replaced["revision"] == 2
    assert replaced["published_revision"] == 1
    assert [h["revision"] for h in hits(invoke, "aardvark")] == [1]
    assert hits(invoke, "pangolin") == []
    invoke("submit", document_id)
    invoke("work")
    assert invoke("status", document_id, "--json").record["status"] == "review_pending"
    assert hits(invoke, "pangolin") == [] and len(hits(invoke, "aardvark")) == 1
    publish(invoke, document_id)
    assert [h["revision"] for h in hits(invoke, "pangolin")] == [2]
    assert hits(invoke, "aardvark") == []


@pytest.mark.parametrize("ending", ["cancel", "fail"])
def test_cancel_or_failure_of_a_new_revision_leaves_the_old_one_served(invoke, tmp_path, ending):
    task = ingest(invoke, tmp_path, "v1.txt", "Old text about wombats.")
    document_id = task["document_id"]
    publish(invoke, document_id)
    new = tmp_path / ("v2.txt" if ending == "cancel" else "v2.pdf")
    new.write_bytes(b"New text about quokkas." if ending == "cancel" else b"%PDF broken")
    invoke("upload", str(new), "--replace", document_id)
    second = invoke("submit", document_id, "--json").record
    if ending == "cancel":
        assert invoke("cancel", second["task_id"]).code == 0
        assert invoke("status", document_id, "--json").record["status"] == "draft"
    else:
        invoke("work")
        assert invoke("status", document_id, "--json").record["status"] == "failed"
    assert [h["revision"] for h in hits(invoke, "wombats")] == [1]
    assert invoke("doctor", "--json").code == 0


# --- roles ---------------------------------------------------------------------------

ROLES = ["viewer", "editor", "reviewer", "worker", "admin"]
ALLOWED = {
    "viewer": {"status", "search", "history"},
    "editor": {"status", "search", "history", "upload", "submit", "cancel", "retry"},
    "reviewer": {"status", "search", "history", "upload", "submit", "cancel", "retry", "publish"},
    "worker": {"status", "work"},
    "admin": {
        "status",
        "search",
        "history",
        "upload",
        "submit",
        "cancel",
        "retry",
        "publish",
        "work",
        "doctor",
        "user",
    },
}


def _team(invoke, root=None):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    tokens = {"admin": admin}
    for role in ROLES[:-1]:
        tokens[role] = invoke(
            "user", "add", f"u-{role}", "--role", role, "--json", token=admin
        ).record["token"]
    return tokens


def _team_and_documents(invoke, root):
    """The team, a queued task and a draft: what every cell of the role matrix acts on."""
    tokens = _team(invoke)
    queued = root / "q.txt"
    queued.write_text("queued text")
    task = invoke("upload", str(queued), "--submit", "--json", token=tokens["admin"]).record
    draft = invoke("upload", str(queued), "--json", token=tokens["admin"]).record
    ids = {
        "document_id": task["document_id"],
        "task_id": task["task_id"],
        "draft_id": draft["document_id"],
    }
    return tokens, ids


@pytest.fixture(scope="module")
def team_home(build_home):
    return build_home(_team)


@pytest.fixture
def team(enter_home, team_home):
    """An admin and a user of every other role: their tokens (a copy of the module's)."""
    return enter_home(team_home, writes=True)


@pytest.fixture(scope="module")
def matrix_home(build_home):
    return build_home(_team_and_documents)


def _command_args(command: str, tmp_path, ids: dict) -> list[str]:
    sample = tmp_path / "sample.txt"
    sample.write_text("matrix text")
    return {
        "status": ["status", ids["document_id"]],
        "search": ["search", "matrix"],
        "history": ["history", ids["document_id"]],
        "upload": ["upload", str(sample)],
        "submit": ["submit", ids["draft_id"]],
        "cancel": ["cancel", ids["task_id"]],
        "retry": ["retry", ids["task_id"]],
        "publish": ["publish", ids["document_id"]],
        "work": ["work"],
        "doctor": ["doctor"],
        "user": ["user", "add", "newcomer", "--role", "viewer"],
    }[command]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("command", sorted(ALLOWED["admin"]))
def test_role_matrix(invoke, tmp_path, enter_home, matrix_home, role, command):
    team, ids = enter_home(matrix_home, writes=True)
    admin = team["admin"]
    before = invoke("status", "--json", token=admin).stdout
    result = invoke(*_command_args(command, tmp_path, ids), "--json", token=team[role])
    if command in ALLOWED[role]:
        assert result.code != 5, result.stderr
    else:
        assert result.code == 5 and result.error["error"] == "forbidden"
        assert invoke("status", "--json", token=admin).stdout == before  # nothing changed


@pytest.mark.parametrize("token", [None, "", "kb_nope_nope", "garbage"])
def test_missing_or_wrong_token_is_forbidden_and_audited(invoke, tmp_path, team, token):
    admin = team["admin"]
    task = ingest(invoke, tmp_path, "a.txt", "Audited text.", token=admin)
    result = invoke("publish", task["document_id"], "--json", token=token)
    assert result.code == 5 and result.error["error"] == "forbidden"
    events = invoke("history", task["document_id"], "--json", token=admin).records
    refused = [event for event in events if event["action"] == "refused"]
    assert refused and refused[-1]["actor"] == "anonymous"
    assert "publish" in refused[-1]["detail"]


def test_history_records_every_change_and_refusal_in_order(invoke, tmp_path, team):
    admin, viewer = team["admin"], team["viewer"]
    task = ingest(invoke, tmp_path, "a.txt", "History text.", token=admin)
    assert invoke("publish", task["document_id"], token=viewer).code == 5
    assert invoke("submit", task["document_id"], token=admin).code == 4
    publish(invoke, task["document_id"], token=admin)
    events = invoke("history", task["document_id"], "--json", token=admin).records
    assert [e["action"] for e in events] == [
        "upload",
        "submit",
        "submit",
        "claim",
        "complete",
        "complete",
        "refused",
        "refused",
        "publish",
    ]
    assert events[6]["actor"] == "u-viewer" and events[7]["actor"] == "root"
    assert events[-1]["from_status"] == "review_pending" and events[-1]["to_status"] == "published"
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    task_events = invoke("history", task["task_id"], "--json", token=admin).records
    assert {e["entity_id"] for e in task_events} == {task["task_id"]}


def test_first_user_must_be_admin_and_tokens_are_stored_hashed(invoke, kb_home):
    refused = invoke("user", "add", "bob", "--role", "viewer", "--json")
    assert refused.code == 4
    created = invoke("user", "add", "alice", "--role", "admin", "--json").record
    assert created["user"] == "alice" and created["role"] == "admin"
    secret = created["token"].split("_", 2)[2]
    [stored] = db_rows("SELECT * FROM users")
    assert secret not in json.dumps(stored) and stored["token_hash"] != secret
    assert invoke("status", "--json").code == 5  # no longer open mode
    assert invoke("status", "--json", token=created["token"]).code == 0
    assert invoke("--help").code == 0 and invoke("--version").code == 0


def test_demo_needs_an_admin_once_one_exists(invoke, team):
    assert invoke("demo", "--json", token=team["viewer"]).code == 5
    assert invoke("demo", "--json").code == 5


def _words(invoke, root):
    text = "Café résumé: the example.com host, v2.0, user@example.com. To be or not to be."
    task = ingest(invoke, root, "words.txt", text)
    publish(invoke, task["document_id"])


@pytest.fixture(scope="module")
def words_home(build_home):
    return build_home(_words)


@pytest.mark.parametrize(
    "query", ["the", "cafe", "resume", "example.com", "user@example.com", "v2", "to be or not"]
)
def test_search_sees_the_same_words_on_every_engine(invoke, enter_home, words_home, query):
    enter_home(words_home)
    assert [hit["filename"] for hit in hits(invoke, query)] == ["words.txt"]
