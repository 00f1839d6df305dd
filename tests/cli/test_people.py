"""People over time: listing users, disabling and enabling them, new tokens, team
changes and revoked grants, through the real CLI in process; refusals audited, bad input
changing nothing, and the caller's bases following each change at once."""

from __future__ import annotations

import pytest

from tests.helpers import FOLLOWS_SETTING, check_error, db_rows, is_rfc3339_utc, sqlite_only

USER_KEYS = {"user", "role", "teams", "state", "created_at", "last_used_at"}


def ok(result) -> list[dict]:
    assert result.code == 0, (result.code, result.stdout, result.stderr)
    return result.records


def _people(invoke, root=None):
    """An admin (root), a viewer in team sales (bob) and a worker (robot): their tokens."""
    root = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    tokens = {"root": root}
    for name, role, teams in [("bob", "viewer", ["--team", "sales"]), ("robot", "worker", [])]:
        made = invoke("user", "add", name, "--role", role, *teams, "--json", token=root)
        tokens[name] = ok(made)[0]["token"]
    return tokens


@pytest.fixture(scope="module")
def people_home(build_home):
    return build_home(_people)


@pytest.fixture
def people(enter_home, people_home):
    """A copy of the module's people (`_people`) of this test's own, to change."""
    return enter_home(people_home, writes=True)


def users(invoke, token) -> dict[str, dict]:
    return {record["user"]: record for record in ok(invoke("user", "list", "--json", token=token))}


def trail(entity: str) -> list[dict]:
    return db_rows(
        "SELECT actor, action, from_status, to_status, detail FROM audit_events"
        " WHERE entity_id = :id ORDER BY id",
        id=entity,
    )


# --- kb user list ----------------------------------------------------------------------


def test_user_list_shows_each_user_without_a_token(invoke, people):
    listed = users(invoke, people["root"])
    assert list(listed) == ["bob", "robot", "root"]
    for record in listed.values():
        assert set(record) == USER_KEYS
        assert record["state"] == "active" and is_rfc3339_utc(record["created_at"])
    assert listed["bob"] == {**listed["bob"], "role": "viewer", "teams": ["sales"]}
    text = invoke("user", "list", token=people["root"])
    assert text.code == 0 and "bob role=viewer active teams=sales" in text.stdout
    for token in people.values():  # neither a token nor its hash, in either output
        secret = token.split("_", 2)[2]  # kb_<id>_<secret>; the secret may hold "_"
        assert secret not in text.stdout + str(listed)
    [row] = db_rows("SELECT token_hash FROM users WHERE name = 'bob'")
    assert row["token_hash"] not in text.stdout + str(listed)


def test_user_list_needs_an_admin_and_works_in_open_mode(invoke, people):
    error = check_error(invoke("user", "list", "--json", token=people["bob"]), 5, "forbidden")
    assert "role viewer may not run user" in error["message"]
    check_error(invoke("user", "list", "--json"), 5, "forbidden")
    assert [e["actor"] for e in trail("command:user")] == ["bob", "anonymous"]


@sqlite_only
@pytest.mark.empty_database  # no home: `user list` must not make one
def test_user_list_without_a_database_creates_none(invoke, kb_home):
    first = invoke("user", "list")  # usage: like any path that does not exist
    assert first.code == 2 and first.stdout == "" and "no knowledge base" in first.stderr
    assert not kb_home.exists() or not any(kb_home.iterdir())


def test_user_list_in_open_mode_lists_nobody(invoke):
    assert ok(invoke("db", "upgrade", "--json"))
    assert ok(invoke("user", "list", "--json")) == []


def test_last_used_is_written_when_a_token_is_accepted_at_most_once_a_minute(invoke, people, kb):
    before = users(invoke, people["root"])
    assert before["bob"]["last_used_at"] is None
    assert before["root"]["last_used_at"] is not None  # the guard accepted root's token
    ok(invoke("status", "--json", token=people["bob"]))
    used = users(invoke, people["root"])["bob"]["last_used_at"]
    assert is_rfc3339_utc(used)
    ok(invoke("status", "--json", token=people["bob"]))  # within the minute: not written
    assert users(invoke, people["root"])["bob"]["last_used_at"] == used
    with kb.db.write() as conn:  # as if bob's last use were long ago
        conn.execute("UPDATE users SET last_used_at = '2020-01-01T00:00:00.000000Z'")
    ok(invoke("status", "--json", token=people["bob"]))
    assert users(invoke, people["root"])["bob"]["last_used_at"] > used
    check_error(invoke("status", "--json", token=people["bob"] + "x"), 5, "forbidden")


# --- kb user disable / enable ------------------------------------------------------------


def test_a_disabled_users_token_is_forbidden_at_once_for_every_command(invoke, people):
    [record] = ok(invoke("user", "disable", "bob", "--json", token=people["root"]))
    assert set(record) == USER_KEYS and record["state"] == "disabled"
    for args in (["status"], ["search", "anything"], ["user", "list"], ["history", "abcdef12"]):
        error = check_error(invoke(*args, "--json", token=people["bob"]), 5, "forbidden")
        assert "user bob is disabled" in error["message"]
        assert "kb user enable bob" in error["message"]
    refused = [e for e in db_rows("SELECT * FROM audit_events") if e["action"] == "refused"]
    assert {e["actor"] for e in refused} == {"bob"} and len(refused) == 4
    again = ok(invoke("user", "disable", "bob", "--json", token=people["root"]))
    assert again[0]["state"] == "disabled"  # disabling twice changes nothing
    [enabled] = ok(invoke("user", "enable", "bob", "--json", token=people["root"]))
    assert enabled["state"] == "active"
    ok(invoke("status", "--json", token=people["bob"]))  # the same token works again
    assert [(e["action"], e["from_status"], e["to_status"]) for e in trail("bob")] == [
        ("user_add", None, "viewer"),
        ("user_disable", "active", "disabled"),
        ("user_enable", "disabled", "active"),
    ]
    assert {e["actor"] for e in trail("bob")} == {"root"}


def test_the_last_active_admin_cannot_be_disabled(invoke, people):
    error = check_error(
        invoke("user", "disable", "root", "--json", token=people["root"]), 4, "conflict"
    )
    assert (
        "last active admin" in error["message"]
        and "kb user add NAME --role admin" in error["message"]
    )
    assert users(invoke, people["root"])["root"]["state"] == "active"
    assert [e["action"] for e in trail("root")] == ["user_add", "refused"]
    ada = ok(invoke("user", "add", "ada", "--role", "admin", "--json", token=people["root"]))
    ok(invoke("user", "disable", "root", "--json", token=ada[0]["token"]))
    check_error(invoke("user", "list", "--json", token=people["root"]), 5, "forbidden")
    error = check_error(
        invoke("user", "disable", "ada", "--json", token=ada[0]["token"]), 4, "conflict"
    )
    assert "ada is the last active admin" in error["message"]
    # A disabled admin keeps kb out of open mode: a token is still needed.
    check_error(invoke("status", "--json"), 5, "forbidden")


@pytest.mark.parametrize("command", ["disable", "enable", "token"])
def test_user_commands_need_an_admin_and_an_existing_user(invoke, people, command):
    check_error(invoke("user", command, "bob", "--json", token=people["bob"]), 5, "forbidden")
    check_error(invoke("user", command, "bob", "--json", token=people["robot"]), 5, "forbidden")
    error = check_error(
        invoke("user", command, "ghost", "--json", token=people["root"]), 3, "not_found"
    )
    assert "no user named 'ghost'" in error["message"]
    assert [e["actor"] for e in trail("bob") if e["action"] == "refused"] == ["bob", "robot"]
    assert users(invoke, people["root"])["bob"]["state"] == "active"


@pytest.mark.parametrize("command", ["disable", "enable", "token"])
def test_in_open_mode_a_user_that_does_not_exist_is_not_found(invoke, command):
    ok(invoke("db", "upgrade", "--json"))
    check_error(invoke("user", command, "bob", "--json"), 3, "not_found")
    check_error(invoke("user", "teams", "bob", "--add", "x", "--json"), 3, "not_found")


# --- kb user token -----------------------------------------------------------------------


def test_a_new_token_replaces_the_old_one_at_once(invoke, people):
    [new] = ok(invoke("user", "token", "bob", "--json", token=people["root"]))
    assert new["user"] == "bob" and new["role"] == "viewer" and new["teams"] == ["sales"]
    assert new["token"].startswith("kb_") and new["token"] != people["bob"]
    error = check_error(invoke("status", "--json", token=people["bob"]), 5, "forbidden")
    assert "not a valid token" in error["message"]
    ok(invoke("status", "--json", token=new["token"]))
    [event] = [e for e in trail("bob") if e["action"] == "user_token"]
    assert event["actor"] == "root" and new["token"] not in str(event)
    text = invoke("user", "token", "robot", token=people["root"])
    assert text.code == 0 and "user robot role=worker" in text.stdout
    assert "shown only once" in text.stderr


# --- kb user teams, kb base revoke: the bases a user reads follow at once -------------


@pytest.fixture
def sales_doc(invoke, people, tmp_path):
    """A published document in base `sales` (team sales): its document id."""
    root = people["root"]
    ok(invoke("base", "create", "sales", "--team", "sales", "--json", token=root))
    path = tmp_path / "playbook.md"
    path.write_text("# Playbook\n\nQualify every lead with the BANT checklist.\n")
    [task] = ok(invoke("upload", str(path), "--base", "sales", "--submit", "--json", token=root))
    ok(invoke("work", "--json", token=root))
    ok(invoke("publish", task["document_id"], "--json", token=root))
    return task["document_id"]


def sees(invoke, token, document_id) -> tuple[bool, bool]:
    """(in kb status, in kb search) for the user of `token`."""
    status = ok(invoke("status", "--json", token=token))
    hits = ok(invoke("search", "BANT checklist lead", "--json", token=token))
    return (
        document_id in {doc["document_id"] for doc in status},
        document_id in {hit["document_id"] for hit in hits},
    )


def test_team_changes_change_what_status_and_search_show_at_once(invoke, people, sales_doc):
    root, bob = people["root"], people["bob"]
    assert sees(invoke, bob, sales_doc) == (True, True)
    [record] = ok(
        invoke(
            "user", "teams", "bob", "--remove", "sales", "--add", "finance", "--json", token=root
        )
    )
    assert set(record) == USER_KEYS and record["teams"] == ["finance"]
    assert sees(invoke, bob, sales_doc) == (False, False)
    check_error(invoke("status", sales_doc, "--json", token=bob), 3, "not_found")
    ok(invoke("user", "teams", "bob", "--add", "sales", "--add", "finance", "--json", token=root))
    assert sees(invoke, bob, sales_doc) == (True, True)
    assert users(invoke, root)["bob"]["teams"] == ["finance", "sales"]
    details = [e["detail"] for e in trail("bob") if e["action"] == "user_teams"]
    assert details == ["added finance; removed sales", "added sales"]  # finance: no change
    assert db_rows("SELECT name FROM teams WHERE name = 'finance'")  # naming it created it


def test_team_changes_refuse_bad_input_and_change_nothing(invoke, people):
    root = people["root"]
    cases = [
        (["user", "teams", "bob"], 2, "usage"),
        (["user", "teams", "bob", "--add", "x y"], 2, "usage"),
        (["user", "teams", "bob", "--add", "a", "--remove", "a"], 2, "usage"),
        (["user", "teams", "bob", "--add", "finance", "--remove", "nope"], 4, "conflict"),
        (["user", "teams", "ghost", "--add", "finance"], 3, "not_found"),
    ]
    for args, exit_code, code in cases:
        check_error(invoke(*args, "--json", token=root), exit_code, code)
    check_error(
        invoke("user", "teams", "bob", "--add", "x", "--json", token=people["bob"]), 5, "forbidden"
    )
    assert users(invoke, root)["bob"]["teams"] == ["sales"]
    assert not db_rows("SELECT name FROM teams WHERE name = 'finance'")
    assert [e["action"] for e in trail("bob")] == ["user_add", "refused", "refused"]


def test_revoking_a_grant_hides_the_base_at_once(invoke, people, sales_doc):
    root, robot = people["root"], people["robot"]
    carol = ok(invoke("user", "add", "carol", "--role", "viewer", "--json", token=root))[0]["token"]
    assert sees(invoke, carol, sales_doc) == (False, False)
    ok(invoke("base", "grant", "sales", "carol", "--json", token=root))
    assert sees(invoke, carol, sales_doc) == (True, True)
    [record] = ok(invoke("base", "revoke", "sales", "carol", "--json", token=root))
    assert record == {
        "base": "sales",
        "teams": ["sales"],
        "grants": [],
        "documents": 1,
        **FOLLOWS_SETTING,
    }
    assert sees(invoke, carol, sales_doc) == (False, False)
    error = check_error(
        invoke("base", "revoke", "sales", "carol", "--json", token=root), 4, "conflict"
    )
    assert "has no grant" in error["message"]
    check_error(invoke("base", "revoke", "nowhere", "carol", "--json", token=root), 3, "not_found")
    check_error(invoke("base", "revoke", "sales", "carol", "--json", token=robot), 5, "forbidden")
    history = ok(invoke("history", "base:sales", "--json", token=root))
    assert [(e["action"], e["actor"]) for e in history if e["action"] != "base_create"] == [
        ("grant", "root"),
        ("revoke", "root"),
        ("refused", "root"),
        ("refused", "robot"),
    ]
    text = invoke("base", "revoke", "sales", "bob", token=root)  # bob reads it by team only
    assert text.code == 4 and "kb base show sales" in text.stderr


def test_a_grant_to_a_user_that_is_gone_can_be_revoked(invoke, people, kb):
    root = people["root"]
    ok(invoke("base", "create", "eng", "--team", "eng", "--json", token=root))
    with kb.db.write() as conn:  # what kb doctor reports as access for nobody
        conn.execute("INSERT INTO base_grants (base, user_name) VALUES ('eng', 'ghost')")
    [record] = ok(invoke("base", "revoke", "eng", "ghost", "--json", token=root))
    assert record["grants"] == []
