"""A `/rerank` endpoint: POST {"model", "query", "documents": [...]} (Jina, Cohere,
vLLM, Infinity; text-embeddings-inference reads "texts", sent too). Both answers are
understood: {"results": [{"index", "relevance_score"}]} and TEI's
[{"index", "score"}]. Failures are sorted as for embeddings (kb_cli/provider_http.py).
"""

from __future__ import annotations

import math
from typing import Any

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

    def rerank(self, query: str, passages: list[str]) -> list[float]:
        payload: dict[str, Any] = {"query": query, "documents": passages, "texts": passages}
        if self.model_name:
            payload["model"] = self.model_name
        answer = self.endpoint.post(payload)
        items: Any = answer.get("results") if isinstance(answer, dict) else answer
        scores: dict[int, float] = {}
        try:
            for item in items:
                index = item["index"]
                score = item["relevance_score"] if "relevance_score" in item else item["score"]
                if not _is_index(index, len(passages)) or index in scores or not _is_score(score):
                    raise ValueError(index)
                scores[index] = float(score)
        except (KeyError, TypeError, ValueError):
            raise ProviderRejected("the rerank server's answer is not a /rerank response") from None
        if len(scores) != len(passages):
            raise ProviderRejected(
                f"the rerank server scored {len(scores)} of {len(passages)} passages"
            )
        return [scores[i] for i in range(len(passages))]


def _is_index(value, count: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count


def _is_score(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
