"""An OpenAI-compatible embeddings endpoint (OpenAI, Ollama, vLLM,
text-embeddings-inference): POST {base}/embeddings with {"model", "input": [...]}.

An unreachable server, a time-out, 429 or 5xx make the task wait and retry
(ProviderUnavailable); any other refusal fails it (ProviderRejected): see
kb_cli/provider_http.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from kb_cli.errors import ProviderRejected
from kb_cli.provider_http import Endpoint

if TYPE_CHECKING:
    import numpy as np


class OpenAICompatibleEmbedder:
    # A model nobody here measured: plain Reciprocal Rank Fusion in every script.
    fusion_weight: ClassVar[dict[str, float]] = {"latin": 1.0, "cjk": 1.0}

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        batch_size: int = 64,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.endpoint = Endpoint(
            base_url.rstrip("/") + "/embeddings",
            api_key,
            timeout_seconds,
            server="the embedding server",
            key_variable="KB_EMBEDDING_API_KEY",
            config_variables="KB_EMBEDDING_URL and KB_EMBEDDING_MODEL",
        )
        self.model_name = model
        self.batch_size = batch_size

    @property
    def model(self) -> str:
        return f"openai:{self.model_name}"

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text])[0]
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        data = self.endpoint.post({"model": self.model_name, "input": texts})
        try:
            items = sorted(data["data"], key=lambda item: item["index"])
            vectors = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise ProviderRejected(
                "the embedding server's answer is not an OpenAI embeddings response"
            ) from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ProviderRejected(
                f"the embedding server returned {len(vectors)} vectors for {len(texts)} texts"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors
