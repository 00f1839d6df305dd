"""Where an S3 walk resumes after a key the S3 client cannot address (kb_cli/store/
sources.py): past every key that shares its unaddressable start, and at no key the
client could address."""

from __future__ import annotations

import pytest

from kb_cli.store.location import S3Location
from kb_cli.store.sources import _common_folder, _invalid_key, _past


@pytest.mark.parametrize(
    ("bad", "resume"),
    [
        ("c/../d.md", "c/..0"),  # every key "c/../..." sorts before "c/..0"
        ("./dot.md", ".0"),
        ("x//y.md", "x/0"),
        ("/lead.md", "0"),
        ("ctl\x01.md", "ctl "),  # every key "ctl" + a control character
        ("a\x7fb", "a\x80"),
    ],
)
def test_the_walk_resumes_past_every_key_sharing_the_unaddressable_start(bad, resume):
    assert _past(bad) == resume
    assert bad < resume


def test_the_unlisted_folder_holds_every_key_between_two_keys():
    assert _common_folder("handbook/a.md", "handbook/sub/../b.md") == "handbook/"
    assert _common_folder("a.md", "z.md") == "/"
    assert _common_folder("", "x//y.md") == "/"


def test_the_refused_key_is_read_from_the_clients_message():
    location = S3Location("bucket", "docs")
    refused = ValueError(
        'Encountered object with invalid path: Error parsing Path "docs/c/../d.md": '
        'Encountered illegal character sequence ".." whilst parsing path segment ".."'
    )
    assert _invalid_key(refused, location) == "c/../d.md"
    empty = ValueError('Could not parse path: Path "docs/x//y.md" contained empty path segment')
    assert _invalid_key(empty, location) == "x//y.md"
    assert _invalid_key(ValueError("something else"), location) is None
