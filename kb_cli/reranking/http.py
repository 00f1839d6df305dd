"""A `/rerank` endpoint: POST {"model", "query", "documents": [...]} (Jina, Cohere,
vLLM, Infinity; text-embeddings-inference reads "texts", sent too). Both answers are
understood: {"results": [{"index", "relevance_score"}]} and TEI's
[{"index", "score"}]. Failures are sorted as for embeddings (kb_cli/provider_http.py).
"""

from __future__ import annotations

from kb_cli.errors import ProviderRejected
from kb_cli.provider_http import Endpoint


class HttpReranker:
    def __init__(
        self, url: str, model: str | None, api_key: str | None, timeout_seconds: float = 10.0
    ) -> None:
        self.endpoint = Endpoint(
            url,
            api_key,
            timeout_seconds,
            server="the rerank server",
            key_variable="KB_RERANK_API_KEY",
            config_variables="KB_RERANK_URL and KB_RERANK_MODEL",
        )
        self.model_name = model

    @property
    def model(self) -> str:
        return f"http:{self.model_name or 'default'}"

    def rerank(self, query: str, passages: list[str]) -> list[float]:
        payload: dict = {"query": query, "documents": passages, "texts": passages}
        if self.model_name:
            payload["model"] = self.model_name
        answer = self.endpoint.post(payload)
        items = answer.get("results") if isinstance(answer, dict) else answer
        scores: list[float | None] = [None] * len(passages)
        try:
            for item in items:
                score = item["relevance_score"] if "relevance_score" in item else item["score"]
                scores[int(item["index"])] = float(score)
        except (KeyError, TypeError, ValueError, IndexError):
            raise ProviderRejected("the rerank server's answer is not a /rerank response") from None
        if any(score is None for score in scores):
            raise ProviderRejected(
                f"the rerank server scored {sum(s is not None for s in scores)} of "
                f"{len(passages)} passages"
            )
        return scores  # type: ignore[return-value]
