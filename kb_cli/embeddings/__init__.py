"""Embedding providers: a local model shipped in a wheel, an OpenAI-compatible HTTP
server, or none. The worker and search see only the `Embedder` protocol; which one
runs is configuration (`EmbeddingSettings`), built once in the application context.

Vectors are unit length, so a dot product is the cosine similarity. They are stored
with their chunk as float16 (half the bytes to read on every search; the ranking of
a 256-dimension cosine does not notice the rounding), with the model's name and
dimension, and search only compares vectors of the configured model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kb_cli.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

PROVIDERS = ("local", "multilingual", "e5", "openai", "none")
VECTOR_DTYPE = "<f2"  # float16, little-endian, on every platform


class Embedder(Protocol):
    """Turns texts into unit vectors. Raises ProviderUnavailable (transient) or
    ProviderRejected (a configuration the provider refuses)."""

    @property
    def model(self) -> str:
        """The name stored with every vector (provider and model)."""
        ...

    batch_size: int

    # How much this model's ranking counts beside the words ranking in hybrid search,
    # by the query's script (textsearch.script_of: `latin`, `cjk`): 1.0 is plain
    # Reciprocal Rank Fusion.
    @property
    def fusion_weight(self) -> dict[str, float]: ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Passages: a float32 array of shape (len(texts), dim), each row of length 1."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """A search question: one float32 unit vector of the passages' dimension."""
        ...


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = "local"
    url: str | None = None  # openai: the API base, e.g. http://127.0.0.1:11434/v1
    model: str | None = None  # openai: the model name the server knows
    api_key: str | None = None
    batch_size: int = 64
    timeout_seconds: float = 30.0

    def describe(self) -> str:
        if self.provider == "none":
            return "embeddings off (KB_EMBEDDINGS=none): lexical search only"
        if self.provider == "local":
            from kb_cli.embeddings.local import MODEL_NAME

            return f"embeddings: local model {MODEL_NAME}; hybrid search"
        if self.provider == "multilingual":
            from kb_cli.embeddings.multilingual import MODEL_NAME

            return f"embeddings: local model {MODEL_NAME} (English, Chinese, across); hybrid search"
        if self.provider == "e5":
            from kb_cli.embeddings.e5 import MODEL_NAME

            return f"embeddings: local model {MODEL_NAME} (slow, reads Chinese); hybrid search"
        return f"embeddings: {self.model} at an OpenAI-compatible server; hybrid search"


def make_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The configured provider, or None for `none`. Loads nothing until first used."""
    if settings.provider == "none":
        return None
    if settings.provider == "local":
        from kb_cli.embeddings.local import LocalEmbedder

        return LocalEmbedder(settings.batch_size)
    if settings.provider == "multilingual":
        from kb_cli.embeddings.multilingual import MultilingualEmbedder

        return MultilingualEmbedder(settings.batch_size)
    if settings.provider == "e5":
        from kb_cli.embeddings.e5 import E5Embedder

        return E5Embedder(settings.batch_size)
    if settings.provider == "openai":
        from kb_cli.embeddings.http import OpenAICompatibleEmbedder

        if not settings.url or not settings.model:
            raise UsageError(
                "the openai provider (KB_EMBEDDINGS=openai, or a base's model openai) needs "
                "KB_EMBEDDING_URL (the API base, e.g. http://127.0.0.1:11434/v1) and "
                "KB_EMBEDDING_MODEL"
            )
        from kb_cli.provider_http import check_url

        return OpenAICompatibleEmbedder(
            check_url(settings.url, "KB_EMBEDDING_URL"),
            settings.model,
            settings.api_key,
            settings.batch_size,
            settings.timeout_seconds,
        )
    raise UsageError(f"KB_EMBEDDINGS must be one of {', '.join(PROVIDERS)}")


def to_blob(vector: np.ndarray) -> bytes:
    return vector.astype(VECTOR_DTYPE).tobytes()


def from_blobs(blobs: list[bytes], dim: int) -> np.ndarray:
    """Stored vectors as one float32 matrix, one row per blob."""
    import numpy as np

    flat = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE)
    return flat.reshape(len(blobs), dim).astype(np.float32)


def check_model(name: str) -> str:
    """A base's model is a provider's name (`--model`); any other is a usage error."""
    if name not in PROVIDERS:
        raise UsageError(f"unknown model {name!r}: one of {', '.join(PROVIDERS)}")
    return name
