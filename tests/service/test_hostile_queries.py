"""Any text at all is a search query: it gets results or a usage error, never a crash,
in every mode, over every base or one (the scoped ranking), on the test's engine."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kb_cli.app import Kb
from kb_cli.errors import UsageError
from kb_cli.ranking import SearchMode
from kb_cli.services.search import SearchRequest, search
from tests.helpers import hostile_queries

TEXTS = {
    "invoices.txt": 'Invoices are kept seven years. The budget "review" meets in May.',
    "travel.md": "# Travel\n\nBook trains early; NEAR the station OR the airport.",
    "报销.txt": "出差回来后三十天内提交报销单。知识库入库流程见附件。",
}


@pytest.fixture
def knowledge(invoke, kb, tmp_path) -> Kb:
    """Three published documents; made once for all the examples of a test (they
    only read them)."""
    for name, text in TEXTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    uploaded = invoke("upload", *(str(tmp_path / name) for name in TEXTS), "--submit", "--json")
    assert uploaded.code == 0, uploaded.stderr
    assert invoke("work", "--drain").code == 0
    for task in uploaded.records:
        assert invoke("publish", task["document_id"]).code == 0
    return kb


def test_empty_phrases_and_control_characters_are_no_crash_in_any_mode(knowledge):
    kb = knowledge
    for mode in SearchMode:
        for text in ('""', 'invoices ""', "budget “” review", "「」", '"in\x00voices"', "\x00"):
            search(kb, SearchRequest(text, mode=mode))
        assert search(kb, SearchRequest('budget "" review', mode=mode)).hits
        assert search(
            kb, SearchRequest('"budget\x00"', mode=mode)
        ).hits  # a control character is a space


# No shrinking: a failure is reported at once instead of after a long minimisation.
@settings(
    max_examples=60,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_property_any_query_is_answered_or_refused_as_usage(knowledge, data):
    text = data.draw(hostile_queries(), label="text")
    mode = data.draw(st.sampled_from(list(SearchMode)), label="mode")
    base = data.draw(st.sampled_from([None, "default"]), label="base")
    try:
        request = SearchRequest(text, mode=mode, per_document=True, base=base, context=1)
        result = search(knowledge, request)
    except UsageError:
        return
    assert len(result.hits) <= 10
    assert all(hit.snippet is not None for hit in result.hits)
