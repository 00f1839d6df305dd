"""What a context builds once (its embedding models, reranker and indexes) is shared
with every context `acting_as` makes of it: `kb serve` answers each request as its own
caller from one opened knowledge base, and must not load a model per request."""

from __future__ import annotations

import threading

from kb_cli.app import Kb
from kb_cli.permissions import Actor, Role


def test_a_callers_context_shares_what_either_built(kb: Kb):
    first = kb.acting_as(Actor("ann", Role.VIEWER))
    embedder = first.embedder  # built by the caller's context, not the opened one
    assert embedder is not None
    assert kb.embedder is embedder
    assert kb.acting_as(Actor("bob", Role.EDITOR)).embedder is embedder
    assert first.vectors is kb.vectors and first.lexical is kb.lexical
    other = first.embedder_for("multilingual")
    assert kb.embedder_for("multilingual") is other is not embedder
    # What depends on the caller is never shared: each context's scope is its own.
    assert (first.actor.name, kb.actor.name) == ("ann", "tester")
    assert first.scope == Actor("ann", Role.VIEWER).scope()
    assert kb.acting_as(Actor("root", Role.ADMIN)).scope != first.scope


def test_requests_at_once_build_a_model_once(kb: Kb, monkeypatch):
    import kb_cli.app as app

    built: list[str] = []
    real = app.make_embedder

    def counted(settings):
        built.append(settings.provider)
        return real(settings)

    monkeypatch.setattr(app, "make_embedder", counted)
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        kb.acting_as(Actor("ann", Role.VIEWER)).embedder_for("multilingual")

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["multilingual"]


def test_an_injected_provider_is_what_every_caller_gets(kb: Kb):
    marker = object()
    kb.reranker = marker  # type: ignore[assignment]
    assert kb.acting_as(Actor("ann", Role.VIEWER)).reranker is marker
