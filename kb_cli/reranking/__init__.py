"""Rerankers: a second look at the fused candidates, query and passage read together.

Search sees only the `Reranker` protocol; which one runs is configuration
(`RerankSettings`, from KB_RERANK*), built once in the application context: `none`
(the default: no model that ships inside a registry package and runs offline was
found that reranks, see benchmarks/README.md) or `http`, a server with the common
`/rerank` API (text-embeddings-inference, Jina, Cohere, vLLM, Infinity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kb_cli.errors import UsageError

PROVIDERS = ("none", "http")


class Reranker(Protocol):
    """Scores passages against a query. Raises ProviderUnavailable (transient) or
    ProviderRejected (a configuration the provider refuses)."""

    def rerank(self, query: str, passages: list[str]) -> list[float]:
        """One relevance score per passage, in the passages' order; higher is better."""
        ...


@dataclass(frozen=True)
class RerankSettings:
    provider: str = "none"
    url: str | None = None  # the full endpoint, e.g. http://127.0.0.1:8080/rerank
    model: str | None = None
    api_key: str | None = None
    timeout_seconds: float = 10.0
    depth: int = 20  # how many fused candidates are reranked


def make_reranker(settings: RerankSettings) -> Reranker | None:
    """The configured reranker, or None for `none`. Contacts nothing until used."""
    if settings.provider == "none":
        return None
    from kb_cli.provider_http import check_url
    from kb_cli.reranking.http import HttpReranker

    if not settings.url:
        raise UsageError(
            "KB_RERANK=http needs KB_RERANK_URL (the endpoint, e.g. http://127.0.0.1:8080/rerank)"
        )
    url = check_url(settings.url, "KB_RERANK_URL")
    return HttpReranker(url, settings.model, settings.api_key, settings.timeout_seconds)
