"""A company-sized knowledge base: search, quality and ingestion at 10k, 100k and 1M chunks.

Homes of real text (this machine's Python sources and documentation, each file uploaded
as `.txt`; never random vectors, never copies of one text) are built once under
--data (default /work/bench-data/scale/, outside the repository) and reused by every
later run. The retrieval benchmark's corpora (benchmarks/corpora) are uploaded into the
same base among the other text, so their questions measure quality at scale.

Every home goes through the real pipeline: `kb upload --submit` in batches, two
`kb work --drain`, `kb publish --all-reviewed`. A build stopped half way resumes where
it stopped when run again (DATA/<engine>-<size>/scale-progress.json); the 1m home takes
hours on a shared 2-core machine, so build it on its own first, at a low priority:

    nohup uv run --group bench python benchmarks/scale.py --build-only --sizes 1m --nice \
        > /work/bench-data/scale/build-1m.log 2>&1 &

A size whose home benchmarks/bulk_home.py built (DATA/<engine>-<size>-bulk, through
kb's own pipeline steps in bulk, much faster) is measured from that home instead.

Per engine (SQLite; PostgreSQL when KB_BENCH_POSTGRES_URL names a server) and size, side
by side: search latency in process and as a whole `kb search` process (p50/p95, each
mode), recall@10 of `kb.vectors` against the exact scan, the peak memory of a search
process, index build time, publish/unpublish/delete of a 1,000-chunk document, and the
retrieval questions' hit@1/hit@3/MRR inside the home beside the corpora alone. Once per
run: ingestion chunks/s of an 8 MB set with one and two workers beside benchmarks/floor.py.

    uv run --group bench python benchmarks/scale.py --sizes 10k 100k [--engines sqlite postgresql]
    uv run --group bench python benchmarks/scale.py --quick                    # a tiny smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import homes
from benchmarks.harness import PY, env_for, peak_rss_of
from benchmarks.homes import DATA, ONE_THREAD, database_url, home_of, kb_env, kb_run, log

REPO = Path(__file__).resolve().parents[1]
# "corpora": the retrieval corpora alone in one base, the baseline of quality at scale.
SIZES = {"corpora": 0, "quick": 600, "10k": 10_000, "100k": 100_000, "1m": 1_000_000}
CHARS_PER_CHUNK = 760  # an estimate: it gave 10,381 chunks for 10k and 80,832 for 100k
UPLOAD_BATCH = 400
LARGE_DOCUMENT_CHARS = 880_000  # about 1,000 chunks
INGEST_BYTES = 8_000_000  # the 8 MB set
INGEST_FILES = 160


# ---------------------------------------------------------------------------- the text
def _sources() -> list[tuple[str, Path, tuple[str, ...]]]:
    """(label, root, suffixes) in the order the homes take them, round robin: two Python
    versions' standard libraries early, so near-identical modules sit side by side as
    they do in a real company's folders, then documentation."""
    pyenv = Path("/root/.pyenv/versions")
    libs = sorted(
        pyenv.glob("3.*/lib/python3.*"),
        key=lambda p: tuple(int(part) for part in p.name[len("python") :].split(".")),
        reverse=True,
    )
    code = (".py",)
    docs = (".md", ".rst", ".txt")
    sources = []
    for lib in libs[:2]:
        sources.append((lib.name, lib, code))
    sources.append(("doc", Path("/usr/share/doc"), ("",)))
    for lib in libs[:1]:
        sources.append((f"{lib.name}-docs", lib / "site-packages", docs))
    for lib in libs[2:]:
        sources.append((lib.name, lib, code))
    rust = sorted(Path("/root/.rustup/toolchains").glob("*/share/doc"))
    for folder in rust[:1]:
        sources.append(("rust", folder, (".html",)))
    return [(label, root, suffixes) for label, root, suffixes in sources if root.is_dir()]


def _walk(root: Path, suffixes: tuple[str, ...], skip_site: bool):
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if skip_site:
            dirs[:] = [d for d in dirs if d != "site-packages"]
        for name in sorted(files):
            path = Path(folder) / name
            if suffixes != ("",) and path.suffix not in suffixes:
                continue
            if suffixes == ("",) and (path.suffix in (".gz", ".html") or "." in name[:1]):
                continue
            yield path


def _readable(path: Path) -> str | None:
    try:
        if not 1_500 <= path.stat().st_size <= 300_000 or path.is_symlink():
            return None
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if "\x00" in text else text


def staged_texts(budget_chars: int) -> list[Path]:
    """Files of real text, about budget_chars in all, copied once under DATA/texts as
    .txt (HTML stays .html, parsed as HTML); a bigger budget extends the same list, so a
    smaller home's files are a prefix of a bigger one's."""
    folder = DATA / "texts"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = DATA / "texts.jsonl"
    listed = []
    if manifest.exists():
        listed = [json.loads(line) for line in manifest.read_text().splitlines() if line]
    total = sum(entry["chars"] for entry in listed)
    if total < budget_chars:
        seen = {entry["source"] for entry in listed}
        walkers = [
            (label, root, _walk(root, suffixes, skip_site=suffixes == (".py",)))
            for label, root, suffixes in _sources()
        ]
        with manifest.open("a") as out:
            while total < budget_chars and walkers:
                for walker in list(walkers):
                    label, root, files = walker
                    path = next(files, None)
                    if path is None:
                        walkers.remove(walker)
                        continue
                    if str(path) in seen:
                        continue
                    text = _readable(path)
                    if text is None:
                        continue
                    suffix = ".html" if path.suffix == ".html" else ".txt"
                    flat = "__".join(path.relative_to(root).parts)
                    name = f"{len(listed):07d}-{label}__{flat}"[:180] + suffix
                    (folder / name).write_text(text, encoding="utf-8")
                    entry = {"file": name, "source": str(path), "chars": len(text)}
                    listed.append(entry)
                    out.write(json.dumps(entry) + "\n")
                    total += len(text)
                    if total >= budget_chars:
                        break
    chosen, used = [], 0
    for entry in listed:
        if used >= budget_chars:
            break
        chosen.append(folder / entry["file"])
        used += entry["chars"]
    return chosen


def corpus_pages() -> list[tuple[str, Path]]:
    from benchmarks.retrieval import load_corpora

    return [(corpus.name, page) for corpus in load_corpora(None) for page in corpus.pages]


# ---------------------------------------------------------------------------- homes
def build_home(
    engine: str, size: str, url: str | None, workers: int = 2, nice: bool = False
) -> dict:
    """The home of `size` through the real pipeline (resumable: files already uploaded
    are skipped by content, tasks left queued are drained, reviews published)."""
    home = home_of(engine, size)
    manifest_path = home / "scale-manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    home.mkdir(parents=True, exist_ok=True)
    env = kb_env(home, url)
    texts = staged_texts(SIZES[size] * CHARS_PER_CHUNK)
    started = time.perf_counter()
    progress_path = home / "scale-progress.json"
    progress = json.loads(progress_path.read_text()) if progress_path.exists() else {}
    if "pages" not in progress:
        pages = corpus_pages()
        corpus_ids = _upload(env, [page for _name, page in pages])
        progress = {
            "pages": {f"{n}/{p.name}": d for (n, p), d in zip(pages, corpus_ids, strict=True)}
        }
        progress_path.write_text(json.dumps(progress))
    for first in range(progress.get("uploaded", 0), len(texts), UPLOAD_BATCH):
        _upload(env, texts[first : first + UPLOAD_BATCH], nice=nice)
        progress["uploaded"] = min(first + UPLOAD_BATCH, len(texts))
        progress_path.write_text(json.dumps(progress))
        log(f"{engine}-{size}: uploaded {progress['uploaded']}/{len(texts)}")
    uploaded = time.perf_counter() - started
    drain(env, workers, nice=nice)
    worked = time.perf_counter() - started - uploaded
    kb_run(env, "publish", "--all-reviewed", nice=nice)
    chunks = published_chunks(env)
    manifest = {
        "engine": engine,
        "size": size,
        "files": len(texts) + len(progress["pages"]),
        "chunks": chunks,
        "pages": progress["pages"],
        "build_seconds": {"upload": round(uploaded, 1), "work": round(worked, 1)},
        "built": "pipeline",
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    log(f"{engine}-{size}: {chunks} published chunks")
    return manifest


def _upload(env: dict[str, str], paths: list[Path], nice: bool = False) -> list[str]:
    """Document ids, in the order of `paths` (a file already uploaded keeps its id)."""
    out = kb_run(env, "upload", *map(str, paths), "--submit", "--json", nice=nice)
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [record.get("document_id") for record in records]


def drain(env: dict[str, str], workers: int, nice: bool = False) -> float:
    prefix = ["nice", "-n", "10"] if nice else []
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [*prefix, PY, "-m", "kb_cli", "work", "--drain", "--worker-id", f"w{i}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    for process in processes:
        _out, err = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"kb work failed: {err[-800:]}")
    return time.perf_counter() - started


def published_chunks(env: dict[str, str], published: bool = True) -> int:
    """Chunks of published revisions (or every chunk stored) in the home of `env`."""
    join = "JOIN documents d ON d.id = c.document_id AND c.revision = d.published_revision"
    code = (
        "from kb_cli.app import Kb; from kb_cli.config import resolve_settings\n"
        "kb = Kb.open(resolve_settings(None), actor='bench')\n"
        "with kb.db.read() as conn:\n"
        f"    print(conn.execute('SELECT count(*) FROM chunks c {join if published else ''}')"
        ".first()[0])\n"
    )
    done = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


# ---------------------------------------------------------------------------- measuring
MODES = ("lexical", "vector", "hybrid")
RETRIEVAL_CONFIGS = {"default": {}, "per-document": {"per_document": True}}


def open_kb(home: Path, url: str | None):
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings

    os.environ["KB_EMBEDDINGS"] = "local"
    return Kb.open(resolve_settings(str(home), url), actor="bench")


def questions() -> list[tuple[str, dict]]:
    """(corpus, question) of every retrieval-benchmark corpus, in their order."""
    from benchmarks.retrieval import load_corpora

    return [(corpus.name, q) for corpus in load_corpora(None) for q in corpus.questions]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


def in_process_latency(kb, asked: list[str]) -> dict[str, dict[str, float]]:
    from kb_cli.ranking import SearchMode
    from kb_cli.services.search import SearchRequest, search

    timings = {}
    for mode in MODES:
        search(kb, SearchRequest(asked[0], mode=SearchMode(mode)))  # the model, the caches
        seconds = []
        for text in asked:
            started = time.perf_counter()
            search(kb, SearchRequest(text, mode=SearchMode(mode)))
            seconds.append(time.perf_counter() - started)
        timings[mode] = percentiles(seconds)
    return timings


def process_latency(env: dict[str, str], asked: list[str]) -> dict[str, dict[str, float]]:
    """A whole `kb search` process per question: wall time and its peak memory."""
    timings = {}
    for mode in MODES:
        walls, peaks = [], []
        for text in asked:
            wall, rss, _out, _err = peak_rss_of(
                [PY, "-m", "kb_cli", "search", text, "--mode", mode, "--json"], env
            )
            walls.append(wall)
            peaks.append(rss)
        timings[mode] = percentiles(walls) | {"peak_mib": max(peaks)}
    return timings


def recall_at_10(kb, asked: list[str]) -> float:
    """How much of the exact top 10 the configured index (kb.vectors) returns."""
    from kb_cli.vectors.stored import exact_nearest

    embedder = kb.embedder
    scope = kb.actor.scope(None)
    found = total = 0
    with kb.db.read() as conn:
        for text in asked:
            query = embedder.embed_query(text)
            args = (conn, embedder.model, query, 10, scope, kb.settings.vector_floor)
            exact = {chunk for chunk, _score in exact_nearest(*args)}
            indexed = {chunk for chunk, _score in kb.vectors.nearest(*args)}
            found += len(exact & indexed)
            total += len(exact)
    return found / total if total else 1.0


def index_build_seconds(env: dict[str, str]) -> float | None:
    """`kb reindex --vectors` when kb offers it (a vector index rebuilt from the
    database); None (n/a) otherwise."""
    helptext = kb_run(env, "reindex", "--help")
    if "--vectors" not in helptext:
        return None
    started = time.perf_counter()
    kb_run(env, "reindex", "--vectors")
    return time.perf_counter() - started


def large_document() -> Path:
    """One real text of about 1,000 chunks that no home holds: the licences under
    /usr/share/common-licenses, then the Rust reference's pages as text, cut at
    LARGE_DOCUMENT_CHARS (staged once)."""
    target = DATA / "large-document.txt"
    if not target.exists():
        pieces, total = [], 0
        roots = [
            Path("/usr/share/common-licenses"),
            *Path("/root/.rustup/toolchains").glob("*/share/doc/rust/html/reference"),
        ]
        for root in roots:
            for path in (
                _walk(root, ("",), skip_site=False)
                if root.name == "common-licenses"
                else _walk(root, (".html",), False)
            ):
                if total >= LARGE_DOCUMENT_CHARS:
                    break
                text = _readable(path)
                if text:
                    text = _plain(text) if path.suffix == ".html" else text
                    pieces.append(f"\n\n{path.name}\n\n{text}")
                    total += len(text)
        target.write_text("".join(pieces)[:LARGE_DOCUMENT_CHARS], encoding="utf-8")
    return target


def _plain(html: str) -> str:
    import re

    text = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", html)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"[ \t]+", " ", text)


def lifecycle_costs(env: dict[str, str]) -> dict[str, float]:
    """Seconds of `kb publish`, `kb unpublish` and `kb delete` (whole processes) of a
    ~1,000-chunk document in the home, which is left as it was."""
    out = kb_run(env, "upload", str(large_document()), "--submit", "--json")
    document = json.loads(out.splitlines()[0])["document_id"]
    drain(env, 1)
    costs = {}
    for step, args in (
        ("publish", ["publish", document]),
        ("unpublish", ["unpublish", document]),
        ("delete", ["delete", document, "--yes"]),
    ):
        started = time.perf_counter()
        kb_run(env, *args)
        costs[step] = time.perf_counter() - started
    return costs


# ---------------------------------------------------------------------------- quality
def quality_in_home(kb, page_ids: dict[str, str]) -> dict[str, dict[str, list]]:
    """Per corpus and configuration, the retrieval benchmark's ranks (as retrieval.py
    counts them) with its corpus among the home's other text: a page is the document
    uploaded from that corpus's file (another corpus's page of the same name is not)."""
    from benchmarks.retrieval import CONFIGS, folded, load_corpora, request
    from kb_cli.services.search import search

    ranks: dict[str, dict[str, list]] = {}
    for corpus in load_corpora(None):
        into = ranks.setdefault(corpus.name, {})
        for name, config in CONFIGS.items():
            pages, passages = [], []
            for question in corpus.questions:
                expected = {page_ids[f"{corpus.name}/{page}"] for page in question["expected"]}
                hits = search(kb, request(question["question"], config)).hits
                pages.append(
                    next((r for r, hit in enumerate(hits, 1) if hit.document_id in expected), None)
                )
                answers = question.get("answer", [])
                if answers:
                    answers = [
                        folded(a) for a in ([answers] if isinstance(answers, str) else answers)
                    ]
                    passages.append(
                        next(
                            (
                                r
                                for r, hit in enumerate(hits, 1)
                                if any(a in folded(hit.text) for a in answers)
                            ),
                            None,
                        )
                    )
            into[name], into[f"{name}:passage"] = pages, passages
    return ranks


def quality_alone() -> dict[str, dict[str, list]]:
    """The same questions with each corpus alone in a home (retrieval.py's homes, kept
    under DATA/alone)."""
    from benchmarks.retrieval import evaluate, ingest, load_corpora

    ranks = {}
    (DATA / "alone").mkdir(parents=True, exist_ok=True)  # kb makes a home, not its parent
    for corpus in load_corpora(None):
        home = DATA / "alone" / corpus.name
        kb = open_kb(home, None) if (home / "kb.sqlite3").exists() else ingest(corpus, home)
        ranks[corpus.name] = evaluate(kb, corpus)
    return ranks


def scored(ranks: dict[str, dict[str, list]]) -> dict[str, dict[str, dict[str, float]]]:
    """hit@1/hit@3/MRR per corpus, per language (all en, all zh) and over everything."""
    from benchmarks.retrieval import score

    groups: dict[str, dict[str, list]] = {}
    for corpus, by_config in ranks.items():
        language = "zh" if corpus.endswith("-zh") else "en"
        for group in (corpus, f"all {language}", "all"):
            into = groups.setdefault(group, {})
            for config, values in by_config.items():
                into.setdefault(config, []).extend(values)
    return {
        group: {config: score(values) for config, values in by_config.items()}
        for group, by_config in groups.items()
    }


# ---------------------------------------------------------------------------- ingestion
def ingestion_set() -> list[Path]:
    """About 8 MB in about 160 real text files (the issue's set): staged files of
    40-60 KB, in order."""
    listed = [json.loads(line) for line in (DATA / "texts.jsonl").read_text().splitlines()]
    chosen, total = [], 0
    for entry in listed:
        if 35_000 <= entry["chars"] <= 70_000 and entry["file"].endswith(".txt"):
            chosen.append(DATA / "texts" / entry["file"])
            total += entry["chars"]
            if total >= INGEST_BYTES or len(chosen) >= INGEST_FILES * 2:
                break
    return chosen


def ingestion(files: list[Path], runs: int) -> dict:
    """`kb work --drain` with one and with two workers (upload excluded: the tasks are
    queued first), and benchmarks/floor.py on the same files, interleaved, medians."""
    import tempfile

    timings: dict[str, list[float]] = {"floor": [], "1 worker": [], "2 workers": []}
    chunks = {}
    for _run in range(runs):
        done = subprocess.run(
            [PY, str(REPO / "benchmarks" / "floor.py"), "--json", *map(str, files)],
            capture_output=True,
            text=True,
            check=True,
            env=env_for(Path(tempfile.gettempdir())),
        )
        floor = json.loads(done.stdout)
        timings["floor"].append(floor["seconds_with_start"])
        chunks["floor"] = floor["chunks"]
        for workers in (1, 2):
            with tempfile.TemporaryDirectory(prefix="kb-scale-ingest-") as scratch:
                home = Path(scratch) / "home"
                env = kb_env(home, None)
                _upload(env, files)
                timings[f"{workers} worker" + ("s" if workers > 1 else "")].append(
                    drain(env, workers)
                )
                chunks["kb"] = published_chunks(env, published=False)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    return {
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "chunks": chunks,
        "seconds": medians,
        "chunks_per_second": {
            name: chunks["kb" if name != "floor" else "floor"] / s for name, s in medians.items()
        },
        "ratio_to_floor": {
            name: s / medians["floor"] for name, s in medians.items() if name != "floor"
        },
    }


# ---------------------------------------------------------------------------- the run
def measure_home(engine: str, size: str, url: str | None, args, manifest: dict) -> dict:
    from benchmarks import pg_home

    home = home_of(engine, size)
    env = kb_env(home, url)
    kb = open_kb(home, url)
    asked = [q["question"] for _corpus, q in questions()]
    sample = spread(asked, args.questions)
    result = {
        "engine": engine,
        "size": size,
        "chunks": manifest["chunks"],
        "files": manifest["files"],
        "built": manifest["built"],
        # First: what search is timed with is the index as a worker leaves it.
        "index_build_seconds": (
            None
            if args.skip_index_build
            else index_build_seconds(env)
            if url is None
            else pg_home.hnsw_build_seconds(url)
        ),
    }
    log(f"{engine}-{size}: search in process")
    result["in_process"] = in_process_latency(kb, sample)
    log(f"{engine}-{size}: search processes")
    result["process"] = process_latency(env, spread(sample, args.process_questions))
    result["recall_at_10"] = recall_at_10(kb, sample)
    if not args.skip_quality:
        log(f"{engine}-{size}: quality")
        result["quality"] = scored(quality_in_home(kb, manifest["pages"]))
    if size == args.sizes[-1] and not args.skip_lifecycle:
        log(f"{engine}-{size}: publish, unpublish, delete of a large document")
        result["lifecycle_seconds"] = lifecycle_costs(env)
    kb.db.close()
    return result


def spread(items: list, count: int) -> list:
    """`count` items taken evenly over the list (every corpus and both languages, as
    the questions come corpus by corpus)."""
    step = max(1, len(items) // max(count, 1))
    return items[::step][:count]


def report(results: list[dict], baselines: dict | None, ingest: dict | None) -> str:
    lines = [
        "| engine | size (chunks) | mode | in process p50 / p95 ms | process p50 / p95 ms | "
        "process peak MiB |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        for mode in MODES:
            i, p = r["in_process"][mode], r["process"][mode]
            lines.append(
                f"| {r['engine']} | {r['size']} ({r['chunks']:,}) | {mode} | "
                f"{i['p50_ms']:.1f} / {i['p95_ms']:.1f} | {p['p50_ms']:.0f} / {p['p95_ms']:.0f} | "
                f"{p['peak_mib']:.0f} |"
            )
    lines += ["", "| engine | size | recall@10 | index build s | publish / unpublish / delete s |"]
    lines.append("| --- | --- | ---: | ---: | --- |")
    for r in results:
        build = r["index_build_seconds"]
        costs = r.get("lifecycle_seconds")
        lines.append(
            f"| {r['engine']} | {r['size']} | {r['recall_at_10']:.3f} | "
            f"{'n/a' if build is None else f'{build:.1f}'} | "
            + (
                " / ".join(f"{costs[k]:.2f}" for k in ("publish", "unpublish", "delete"))
                if costs
                else "-"
            )
            + " |"
        )
    if baselines is not None:
        lines += ["", _quality_table(results, baselines)]
    if ingest is not None:
        lines += ["", _ingestion_line(ingest)]
    return "\n".join(lines)


def _ingestion_line(ingest: dict) -> str:
    parts = []
    for name in ("floor", "1 worker", "2 workers"):
        rate = ingest["chunks_per_second"][name]
        part = f"{name} {ingest['seconds'][name]:.2f} s ({rate:.0f} chunks/s"
        if name != "floor":
            part += f", {ingest['ratio_to_floor'][name]:.2f}x the floor"
        parts.append(part + ")")
    size = f"{ingest['files']} files ({ingest['bytes'] / 1e6:.1f} MB)"
    return f"Ingestion of {size}: " + ", ".join(parts)


def _quality_table(results: list[dict], baselines: dict[str, dict]) -> str:
    """Per corpus: each baseline, then each home, with the hit@3 (documents, default)
    it lost against the corpora together in one base (the same base, no other text)."""
    from benchmarks.retrieval import K

    def cell(scores: dict, config: str) -> str:
        d, p = scores[config], scores[f"{config}:passage"]
        return (
            f"{d['hit@1']:.2f} / {d[f'hit@{K}']:.2f} / {d['mrr']:.2f} ; "
            f"{p['hit@1']:.2f} / {p[f'hit@{K}']:.2f} / {p['mrr']:.2f}"
        )

    lines = [
        "| corpus | where | default: documents ; passages (hit@1 / hit@3 / MRR) | "
        "per-document | hit@3 lost (documents, default) |",
        "| --- | --- | --- | --- | ---: |",
    ]
    together = baselines["together"]
    for group in together:
        for name, scores in baselines.items():
            lines.append(
                f"| {group} | {name} | {cell(scores[group], 'default')} | "
                f"{cell(scores[group], 'per-document')} | |"
            )
        for r in results:
            if "quality" in r:
                scores = r["quality"][group]
                lost = together[group]["default"][f"hit@{K}"] - scores["default"][f"hit@{K}"]
                lines.append(
                    f"| {group} | {r['engine']} {r['size']} | {cell(scores, 'default')} | "
                    f"{cell(scores, 'per-document')} | {lost:+.2f} |"
                )
    return "\n".join(lines)


def baselines() -> dict[str, dict]:
    """Quality without the other text: each corpus in a home of its own (as
    retrieval.py asks), and the four corpora together in one base (the scale homes'
    base without the other text: what the other text alone costs)."""
    manifest = build_home("sqlite", "corpora", None)
    kb = open_kb(home_of("sqlite", "corpora"), None)
    together = scored(quality_in_home(kb, manifest["pages"]))
    kb.db.close()
    return {"alone": scored(quality_alone()), "together": together}


def _keep(args, results: list[dict]) -> None:
    if args.quick and not args.output:
        return
    output = (args.output or DATA / "scale-latest.json").with_suffix(".partial.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1))


def main() -> None:
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["10k", "100k"])
    parser.add_argument("--engines", nargs="+", choices=["sqlite", "postgresql"], default=None)
    parser.add_argument("--data", type=Path, help=f"where homes are built (default {DATA})")
    parser.add_argument("--questions", type=int, default=60, help="questions timed in process")
    parser.add_argument("--process-questions", type=int, default=8, help="per mode, as processes")
    parser.add_argument("--runs", type=int, default=3, help="ingestion runs (medians)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-ingestion", action="store_true")
    parser.add_argument("--skip-lifecycle", action="store_true")
    parser.add_argument(
        "--skip-index-build", action="store_true", help="search the index as it is (n/a)"
    )
    parser.add_argument(
        "--build-only", action="store_true", help="build the homes, measure nothing"
    )
    parser.add_argument("--nice", action="store_true", help="build at a low priority")
    parser.add_argument("--workers", type=int, default=2, help="workers that build a home")
    parser.add_argument("--quick", action="store_true", help="a tiny home in a scratch folder")
    parser.add_argument("--output", type=Path, help="the JSON result (DATA/scale-latest.json)")
    args = parser.parse_args()
    if args.quick:
        import tempfile

        DATA = Path(tempfile.mkdtemp(prefix="kb-scale-quick-"))
        args.sizes, args.questions, args.process_questions, args.runs = ["quick"], 6, 1, 1
        args.skip_quality = args.skip_ingestion = True
    elif args.data:
        DATA = args.data
    homes.DATA = DATA  # where home_of looks too
    os.environ.update(ONE_THREAD)
    admin_url = os.environ.get("KB_BENCH_POSTGRES_URL")
    engines = args.engines or (["sqlite", "postgresql"] if admin_url else ["sqlite"])
    if "postgresql" in engines and not admin_url:
        raise SystemExit("--engines postgresql needs KB_BENCH_POSTGRES_URL (an admin URL)")
    results = []
    try:
        for engine in engines:
            for size in args.sizes:
                url = database_url(engine, size, admin_url)
                manifest = build_home(engine, size, url, args.workers, nice=args.nice)
                if not args.build_only:
                    results.append(measure_home(engine, size, url, args, manifest))
                    _keep(args, results)  # what is measured survives a later failure
        if args.build_only:
            return
        alone = None if args.skip_quality else baselines()
        ingest = None if args.skip_ingestion else ingestion(ingestion_set(), args.runs)
    finally:
        if args.quick:
            shutil.rmtree(DATA, ignore_errors=True)
    print(report(results, alone, ingest))
    output = args.output or DATA / "scale-latest.json"
    if not args.quick or args.output:
        output.parent.mkdir(parents=True, exist_ok=True)
        record = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        record |= {"results": results, "baselines": alone, "ingestion": ingest}
        output.write_text(json.dumps(record, indent=1))
        print(f"\nwritten to {output}")


if __name__ == "__main__":
    main()
