"""The built-in embedding model: WordLlama `l2_supercat` at 256 dimensions (MIT).

The `wordllama` wheel ships the weights and the tokenizer; they are read straight from
its package directory, so nothing is downloaded at run time and wordllama's own loader
(with its pydantic, requests and hub fallback) is never imported. The model is a
table of token vectors: a text's vector is the mean of its tokens' rows, made unit
length (what `WordLlama.embed` computes; a test compares the two).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from kb_cli.errors import ProviderRejected

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

MODEL_NAME = "wordllama-l2_supercat-256"
WEIGHTS_FILE = "weights/l2_supercat_256.safetensors"
TOKENIZER_FILE = "tokenizers/l2_supercat_tokenizer_config.json"
_TENSOR = "embedding.weight"


def package_dir() -> Path:
    spec = importlib.util.find_spec("wordllama")  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ProviderRejected(
            "the local embedding model is not installed (package wordllama); "
            "reinstall kb, or set KB_EMBEDDINGS=none"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _load() -> _Model:
    """The tokenizer and the token table, once per process."""
    import numpy as np
    from tokenizers import Tokenizer

    package = package_dir()
    tokenizer = Tokenizer.from_file(str(package / TOKENIZER_FILE))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    weights = package / WEIGHTS_FILE
    with weights.open("rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        entry = json.loads(file.read(header_size))[_TENSOR]
    if entry["dtype"] != "F16":
        raise ProviderRejected(f"unexpected weights in {MODEL_NAME}: {entry['dtype']}")
    start, _end = entry["data_offsets"]
    table = np.memmap(
        weights, dtype="<f2", mode="r", offset=8 + header_size + start, shape=tuple(entry["shape"])
    )
    return _Model(tokenizer, table)


class LocalEmbedder:
    model = MODEL_NAME
    # Chosen on benchmarks/retrieval.py: in English the model adds to the words ranking
    # at a fifth of its weight; in Chinese it is close to a bag of characters and only
    # lowered the words ranking's hit rate, so Chinese queries rank by words alone (its
    # candidates still follow those of the words ranking).
    fusion_weight: ClassVar[dict[str, float]] = {"latin": 0.2, "cjk": 0.0}

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text])[0]
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        model = _load()
        table = model.table
        encodings = model.tokenizer.encode_batch(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        ids = np.fromiter(
            (i for e in encodings for i in e.ids), dtype=np.int64, count=int(lengths.sum())
        )
        np.clip(ids, 0, table.shape[0] - 1, out=ids)
        vectors = _token_sums(ids, lengths, model)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors


# Up to this many tokens, a batch gathers its tokens' rows from the memory-mapped
# table (a query: a few rows). Beyond it, gathering rows one by one costs more than
# counting tokens per text and multiplying the counts by the whole table (in float32,
# converted once): 64 Chinese chunks are ~70,000 tokens, 0.2 s gathered, 0.02 s counted.
# The product costs the same for any batch, so a batch of English (64 chunks of Python
# sources, 14,500 tokens) is gathered: 0.12 s against 0.22 s counted, one BLAS thread,
# CPU time; 64 Chinese chunks of 34,000 tokens cost the same either way.
_GATHER_LIMIT = 32768


def _token_sums(ids: np.ndarray, lengths: np.ndarray, model: _Model) -> np.ndarray:
    """Per text, the sum of its tokens' rows (float32)."""
    import numpy as np

    table = model.table
    texts, vocabulary = len(lengths), table.shape[0]
    if ids.size <= _GATHER_LIMIT:
        sums = np.zeros((texts, table.shape[1]), dtype=np.float32)
        filled = lengths > 0  # reduceat needs non-empty segments
        if filled.any():
            starts = (np.cumsum(lengths) - lengths)[filled]
            sums[filled] = np.add.reduceat(table[ids].astype(np.float32), starts, axis=0)
        return sums
    cells, counts = np.unique(
        np.repeat(np.arange(texts), lengths) * vocabulary + ids, return_counts=True
    )
    matrix = np.zeros(texts * vocabulary, dtype=np.float32)
    matrix[cells] = counts
    counted: np.ndarray = matrix.reshape(texts, vocabulary) @ model.table32
    return counted


class _Model:
    def __init__(self, tokenizer: Tokenizer, table: np.ndarray) -> None:
        self.tokenizer = tokenizer
        self.table = table  # float16, memory-mapped

    @functools.cached_property
    def table32(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self.table, dtype=np.float32)
