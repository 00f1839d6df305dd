"""Hits in score order, always: over random corpora (copies, long pages whose chunks
overlap, pages that share words) and random queries, no score rises down a result list,
in every mode, with and without --per-document and --context, on the test's engine."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kb_cli.app import Kb
from kb_cli.ranking import SearchMode
from kb_cli.services.bases import create_base
from kb_cli.services.documents import publish_document, upload_files
from kb_cli.services.search import SearchRequest, search
from kb_cli.worker import Worker, WorkerOptions

WORDS = [
    "invoice",
    "receipt",
    "travel",
    "budget",
    "review",
    "trains",
    "airport",
    "station",
    "refund",
    "deadline",
    "workday",
    "manager",
    "approval",
    "hotel",
    "taxi",
    "expense",
    "policy",
    "报销",
    "出差",
    "发票",
    "审批",
]
_bases = itertools.count(1)


def sentences(draw, count: int) -> str:
    words = st.lists(st.sampled_from(WORDS), min_size=3, max_size=12)
    return "\n\n".join(" ".join(draw(words)) + "." for _ in range(count))


@st.composite
def corpora(draw) -> list[str]:
    """Texts of 2-6 documents: some short, some long enough for several overlapping
    chunks, and some copies of another."""
    texts: list[str] = []
    for _ in range(draw(st.integers(2, 6))):
        if texts and draw(st.booleans()):
            texts.append(draw(st.sampled_from(texts)))  # a copy
        else:
            texts.append(sentences(draw, draw(st.sampled_from([1, 3, 40]))))
    return texts


def published_base(kb: Kb, tmp_path, texts: list[str]) -> str:
    """A base of its own holding `texts` published: examples never see each other."""
    base = f"corpus{next(_bases)}"
    create_base(kb, base, [])
    folder = tmp_path / base
    folder.mkdir()
    paths = []
    for number, text in enumerate(texts):
        path = folder / f"page{number}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    tasks = upload_files(kb, paths, submit=True, base=base)
    list(Worker(kb, WorkerOptions(worker_id="property")).run(max_tasks=None))
    for task in tasks:
        publish_document(kb, task.document_id)
    return base


# No shrinking: a failure is reported at once instead of after a long minimisation.
@settings(
    max_examples=12,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_property_scores_never_rise_down_a_result_list(kb, tmp_path, data):
    base = published_base(kb, tmp_path, data.draw(corpora(), label="corpus"))
    for _ in range(4):
        query = " ".join(data.draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)))
        for mode, per_document, context in itertools.product(SearchMode, (False, True), (0, 1)):
            request = SearchRequest(query, mode=mode, per_document=per_document, base=base)
            hits = search(kb, dataclasses.replace(request, context=context)).hits
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True), (query, mode, per_document, scores)
            texts = [" ".join(hit.text.split()) for hit in hits]
            assert len(set(texts)) == len(texts), "a copy was not collapsed"
