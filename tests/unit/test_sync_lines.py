"""`kb sync --json` builds its per-file line by hand (it prints one per file of a
tree): the line must be the one every other record gets from write_json."""

from __future__ import annotations

import json

import pytest

from kb_cli.console.core import _JSON, _escaped
from kb_cli.console.sync import sync_json
from kb_cli.services.sync import SyncRecord

RECORDS = [
    SyncRecord("notes/a.md", "unchanged", "0f1e2d3c-0000-4000-8000-000000000000"),
    SyncRecord("new.md", "added"),
    SyncRecord('we"ird\\name\n\x1b[31m\x7f\x85.md', "failed", None, "not readable: denied"),
    SyncRecord("日本語/ファイル.md", "skipped", "id", "unsupported file type: é"),
]


@pytest.mark.parametrize("record", RECORDS)
def test_a_sync_line_is_write_jsons_line(record):
    line = sync_json(record)
    assert line == _escaped(_JSON.encode(record.to_dict()))
    assert json.loads(line) == record.to_dict()
    assert "\x7f" not in line and "\x85" not in line
