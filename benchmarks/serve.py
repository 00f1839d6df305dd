"""Search through `kb serve` against the same search in process and as `kb search`
processes, and `kb serve` under 200 concurrent searches and 50 concurrent uploads
(issue 49, item 5: "search through the server in process (the model loaded once): p50
within 1.2x of the in-process service call at 88k chunks ...; 200 concurrent searches
and 50 concurrent uploads without an error").

One home (by default scale.py's SQLite 100k home, 80,832 chunks of real text:
`scale.py --build-only --sizes 100k`, about 1.5 minutes on a quiet 2-core machine), the
retrieval benchmark's questions (benchmarks/corpora) spread over every corpus, kb's
default search mode (hybrid where the chunks have vectors), 10 hits:

- in process: `kb_cli.services.search.search` on a Kb opened once (as scale.py times
  it), after a warm-up;
- through the server: `kb serve --port 0 --json` as a real subprocess on loopback,
  `GET /api/search?q=...&limit=10` over one keep-alive connection (http.client: httpx
  is no dependency of kb), one request at a time, after a warm-up. The two are
  interleaved question by question (which goes first alternates), so that both see the
  same load; the ratio is server p50 / in-process p50. The server's hits are compared
  with the in-process ones (document and chunk, in order), and `GET /api/health` (no
  database) is timed on the same connection: the HTTP floor;
- as processes: `kb search QUERY --json`, a whole process per question (fewer);
- 200 concurrent searches: 200 threads, each with its own connection opened first,
  released at once (200 requests in flight): answers other than 200, client errors
  (reset, timeout), wall time and per-request latency;
- 50 concurrent uploads: `POST /api/documents` (multipart `files`, one small distinct
  text file each), 50 at once, into a second server on a scratch copy of the home (the
  measured home is never written): answers other than 201, client errors, wall time,
  and whether the copy holds 50 more documents afterwards.

The server's open files, threads and resident memory are read from /proc after each
phase (a leak shows as growth), and its stderr is kept and shown when it says anything
beyond its start-up note. `--breakdown` times the steps of one search request in
process, as kb/web/routes.py runs them (open the knowledge base as the caller, search,
the records, JSON, close), to say where the server's extra time goes.

    uv run --group bench python benchmarks/serve.py                  # the 100k home
    uv run --group bench python benchmarks/serve.py --breakdown      # and where time goes
    uv run --group bench python benchmarks/serve.py --quick          # a tiny home, ~1 min

The result is printed as a table and written to DATA/serve-latest.json (DATA as in
benchmarks/homes.py; --quick writes only with --output).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import homes
from benchmarks.harness import PY
from benchmarks.homes import ONE_THREAD, kb_env, kb_run, log

LIMIT = 10
TIMEOUT = 300.0  # seconds a client waits for one answer


# ---------------------------------------------------------------------------- homes
def measured_home(args) -> Path:
    if args.home:
        return args.home
    home = homes.home_of("sqlite", args.size)
    if not (home / "scale-manifest.json").exists():
        raise SystemExit(
            f"no {args.size} home at {home}: build it first with\n"
            f"  nice -n 10 uv run --group bench python benchmarks/scale.py --build-only "
            f"--sizes {args.size} --workers 1"
        )
    return home


def quick_home(folder: Path) -> Path:
    """The retrieval corpora alone, uploaded, worked and published by kb's commands."""
    from benchmarks.scale import _upload, corpus_pages, drain

    home = folder / "home"
    env = kb_env(home, None)
    _upload(env, [page for _name, page in corpus_pages()])
    drain(env, 1)
    kb_run(env, "publish", "--all-reviewed")
    return home


def chunk_count(home: Path) -> int:
    from benchmarks.scale import published_chunks

    return published_chunks(kb_env(home, None))


def document_count(home: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{home / 'kb.sqlite3'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    finally:
        conn.close()


def questions(count: int) -> list[str]:
    from benchmarks.scale import questions as every_question
    from benchmarks.scale import spread

    asked = [q["question"] for _corpus, q in every_question()]
    return spread(asked, count) if count < len(asked) else asked


# ---------------------------------------------------------------------------- the server
class Server:
    """`kb serve --port 0 --json` on a home, its stderr kept in a file."""

    def __init__(self, home: Path, scratch: Path, name: str) -> None:
        self.stderr_path = scratch / f"{name}.stderr"
        self._stderr = self.stderr_path.open("w")
        self.process = subprocess.Popen(
            [PY, "-m", "kb_cli", "serve", "--port", "0", "--json"],
            env=kb_env(home, None),
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        line = self.process.stdout.readline()  # printed once it is ready
        if not line:
            self.process.wait()
            raise RuntimeError(f"kb serve did not start: {self.stderr_path.read_text()[-800:]}")
        where = json.loads(line)
        self.host, self.port = where["host"], where["port"]

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)

    def state(self) -> dict:
        """Open files, threads and memory of the server process, from /proc (a second
        after the last answer: connections the clients closed are closed by then)."""
        time.sleep(1.0)
        pid = self.process.pid
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        return {
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(status["Threads"]),
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
        }

    def stop(self) -> dict:
        """SIGTERM (a graceful stop); its exit code and what it said on stderr."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._stderr.close()
        said = [
            line
            for line in self.stderr_path.read_text().splitlines()
            if line.strip() and "serving; Ctrl-C stops it" not in line
        ]
        return {"exit_code": code, "stderr_lines": len(said), "stderr_tail": said[-20:]}


def search_path(text: str) -> str:
    return "/api/search?" + urllib.parse.urlencode({"q": text, "limit": LIMIT})


def ask(conn: http.client.HTTPConnection, text: str) -> tuple[int, bytes]:
    conn.request("GET", search_path(text))
    response = conn.getresponse()
    return response.status, response.read()


# ---------------------------------------------------------------------------- measuring
def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": p95 * 1000,
        "min_ms": ordered[0] * 1000,
        "max_ms": ordered[-1] * 1000,
        "n": len(ordered),
    }


def open_kb(home: Path):
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings

    os.environ["KB_EMBEDDINGS"] = "local"
    return Kb.open(resolve_settings(str(home)), actor="bench")


def sequential(kb, server: Server, asked: list[str], warmup: int) -> dict:
    """In process and through the server, question by question, alternating which goes
    first; the server's hits checked against the in-process ones."""
    from kb_cli.services.search import SearchRequest, search

    def hits_of(records: list[dict]) -> list[tuple[str, int]]:
        return [(hit["document_id"], hit["chunk_index"]) for hit in records]

    conn = server.connection()
    for text in asked[:warmup]:  # the model, the caches, the connection
        search(kb, SearchRequest(text, LIMIT))
        status, _body = ask(conn, text)
        if status != 200:
            raise RuntimeError(f"warm-up search answered {status}: {_body[:300]!r}")
    inproc, served, differ, failed = [], [], 0, []
    for n, text in enumerate(asked):
        for side in ("in", "server") if n % 2 == 0 else ("server", "in"):
            if side == "in":
                started = time.perf_counter()
                result = search(kb, SearchRequest(text, LIMIT))
                inproc.append(time.perf_counter() - started)
                mine = [(hit.document_id, hit.chunk_index) for hit in result.hits]
            else:
                started = time.perf_counter()
                status, body = ask(conn, text)
                served.append(time.perf_counter() - started)
                if status != 200:
                    failed.append({"question": text, "status": status, "body": body[:300].decode()})
                    theirs = None
                else:
                    theirs = hits_of(json.loads(body)["hits"])
        if theirs is not None and theirs != mine:
            differ += 1
    health = []  # the HTTP floor: a route that reads no database
    for _ in range(len(asked)):
        started = time.perf_counter()
        conn.request("GET", "/api/health")
        response = conn.getresponse()
        response.read()
        health.append(time.perf_counter() - started)
    conn.close()
    i, s = percentiles(inproc), percentiles(served)
    return {
        "in_process": i,
        "server": s,
        "ratio_p50": s["p50_ms"] / i["p50_ms"],
        "ratio_p95": s["p95_ms"] / i["p95_ms"],
        "health": percentiles(health),
        "hits_differ": differ,
        "failed": failed,
    }


def processes(home: Path, asked: list[str]) -> dict:
    """A whole `kb search QUERY --json` process per question."""
    env = kb_env(home, None)
    walls = []
    for text in asked:
        started = time.perf_counter()
        done = subprocess.run(
            [PY, "-m", "kb_cli", "search", text, "--json"], env=env, capture_output=True, text=True
        )
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"kb search failed: {done.stderr[-500:]}")
    return percentiles(walls)


def concurrently(server: Server, count: int, send) -> dict:
    """`count` threads, each with its own connection opened first, then all released
    at once: `send(conn, n)` makes request n and returns (status, body). Answers by
    status, client errors, wall time from the release, per-request latency."""
    barrier = threading.Barrier(count + 1)
    statuses: list[int | None] = [None] * count
    bodies: list[bytes] = [b""] * count
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        conn = server.connection()
        try:
            conn.connect()
        except OSError as error:
            with lock:
                errors.append(f"connect: {error!r}")
            barrier.wait()
            return
        barrier.wait()
        started = time.perf_counter()
        try:
            statuses[n], bodies[n] = send(conn, n)
            with lock:
                latencies.append(time.perf_counter() - started)
        except Exception as error:  # a reset, a timeout: the client's view of a failure
            with lock:
                errors.append(f"{type(error).__name__}: {error}")
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    by_status: dict[str, int] = {}
    for status in statuses:
        by_status[str(status)] = by_status.get(str(status), 0) + 1
    odd = [
        bodies[n][:300].decode(errors="replace")
        for n, status in enumerate(statuses)
        if status is not None and status >= 300
    ]
    return {
        "requests": count,
        "by_status": by_status,
        "client_errors": len(errors),
        "client_error_samples": sorted(set(errors))[:5],
        "error_bodies": sorted(set(odd))[:5],
        "wall_s": wall,
        "latency": percentiles(latencies) if latencies else None,
        "_bodies": bodies,
    }


def concurrent_searches(server: Server, asked: list[str], count: int) -> dict:
    def send(conn: http.client.HTTPConnection, n: int) -> tuple[int, bytes]:
        return ask(conn, asked[n % len(asked)])

    result = concurrently(server, count, send)
    del result["_bodies"]
    result["ok"] = result["by_status"].get("200", 0)
    return result


def concurrent_uploads(server: Server, home: Path, count: int) -> dict:
    """`count` uploads at once, one small distinct text file each, into `home` (a
    scratch copy): afterwards the copy holds `count` more documents."""
    before = document_count(home)
    run = uuid.uuid4().hex[:8]

    def send(conn: http.client.HTTPConnection, n: int) -> tuple[int, bytes]:
        boundary = f"kbbench{uuid.uuid4().hex}"
        text = f"Upload {n} of run {run}: a small note about invoices, ledgers and audits.\n"
        body = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="files"; filename="serve-{run}-{n}.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
            f"{text}\r\n"
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="base"\r\n\r\n'
            "default\r\n"
            f"--{boundary}--\r\n"
        ).encode()
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        conn.request("POST", "/api/documents", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    result = concurrently(server, count, send)
    ids = set()
    for body in result["_bodies"]:
        with contextlib.suppress(ValueError, TypeError, KeyError):  # an error's body
            ids.update(record["document_id"] for record in json.loads(body or b"[]"))
    del result["_bodies"]
    result["ok"] = result["by_status"].get("201", 0)
    result["distinct_documents"] = len(ids)
    result["documents_added"] = document_count(home) - before
    return result


def breakdown(home: Path, asked: list[str], warmup: int) -> dict:
    """The steps of one `GET /api/search` as routes.py runs them, in process, per
    question (p50 ms each): open the knowledge base as the caller (access.open_as),
    search, the hit records, JSON, close; beside a search on a Kb opened once."""
    from kb_cli.config import resolve_settings
    from kb_cli.permissions import SEARCH
    from kb_cli.services import access
    from kb_cli.services.search import SearchRequest, search

    os.environ["KB_EMBEDDINGS"] = "local"
    settings = resolve_settings(str(home))
    steps: dict[str, list[float]] = {
        "open_as": [],
        "search (fresh Kb)": [],
        "records": [],
        "json": [],
        "close": [],
        "search (Kb kept)": [],
    }
    kept = open_kb(home)
    for n, text in enumerate(asked[:warmup] + asked):
        t0 = time.perf_counter()
        kb, _grant = access.open_as(settings, SEARCH, None, False, (), (), token="")
        t1 = time.perf_counter()
        result = search(kb, SearchRequest(text, LIMIT))
        t2 = time.perf_counter()
        answer = {"hits": [hit.to_dict() for hit in result.hits], "mode": str(result.mode)}
        t3 = time.perf_counter()
        json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        t4 = time.perf_counter()
        kb.db.close()
        t5 = time.perf_counter()
        search(kept, SearchRequest(text, LIMIT))
        t6 = time.perf_counter()
        if n >= warmup:
            took = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)
            for name, seconds in zip(steps, took, strict=True):
                steps[name].append(seconds)
    kept.db.close()
    return {name: statistics.median(values) * 1000 for name, values in steps.items()}


# ---------------------------------------------------------------------------- the run
def run(args) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="kb-serve-bench-"))
    try:
        if args.quick:
            log("quick: building a home of the retrieval corpora")
            started = time.perf_counter()
            home = quick_home(scratch)
            log(f"quick: built in {time.perf_counter() - started:.1f} s")
        else:
            home = measured_home(args)
        chunks = chunk_count(home)
        asked = questions(args.questions)
        result: dict = {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "home": "quick (retrieval corpora)" if args.quick else str(home),
            "chunks": chunks,
            "questions": len(asked),
            "load_before": os.getloadavg(),
        }
        # The upload server's home: a copy, taken before anything runs on the home.
        copy = scratch / "upload-home"
        shutil.copytree(home, copy)

        server = Server(home, scratch, "search")
        states = {"started": server.state()}
        try:
            kb = open_kb(home)
            log(f"{chunks} chunks: {len(asked)} questions in process and through the server")
            result["sequential"] = sequential(kb, server, asked, args.warmup)
            kb.db.close()
            states["after sequential"] = server.state()
            log(f"{args.concurrent} concurrent searches")
            result["concurrent_searches"] = concurrent_searches(server, asked, args.concurrent)
            states["after concurrent searches"] = server.state()
            log(f"{args.concurrent} concurrent searches, again")
            result["concurrent_searches_again"] = concurrent_searches(
                server, asked[::-1], args.concurrent
            )
            states["after second concurrent searches"] = server.state()
        finally:
            result["search_server"] = server.stop() | {"states": states}

        log(f"{args.process_questions} `kb search` processes")
        result["processes"] = processes(home, questions(args.process_questions))

        uploader = Server(copy, scratch, "upload")
        upload_states = {"started": uploader.state()}
        try:
            log(f"{args.uploads} concurrent uploads into a copy of the home")
            result["concurrent_uploads"] = concurrent_uploads(uploader, copy, args.uploads)
            upload_states["after uploads"] = uploader.state()
        finally:
            result["upload_server"] = uploader.stop() | {"states": upload_states}

        if args.breakdown:
            log("where one request's time goes, in process")
            result["breakdown_ms"] = breakdown(home, asked, args.warmup)
        result["load_after"] = os.getloadavg()
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(r: dict) -> str:
    s = r["sequential"]
    i, v, p, h = s["in_process"], s["server"], r["processes"], s["health"]
    lines = [
        f"{r['home']}: {r['chunks']:,} published chunks, {r['questions']} questions, "
        f"default mode, limit {LIMIT}; load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}",
        "",
        "| search | p50 ms | p95 ms | runs | p50 / in process |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| in process (`services.search.search`, Kb kept) | {i['p50_ms']:.1f} | "
        f"{i['p95_ms']:.1f} | {i['n']} | 1.00x |",
        f"| through `kb serve` (one keep-alive connection) | {v['p50_ms']:.1f} | "
        f"{v['p95_ms']:.1f} | {v['n']} | **{s['ratio_p50']:.2f}x** |",
        f"| `GET /api/health` through `kb serve` (no database: the HTTP floor) | "
        f"{h['p50_ms']:.1f} | {h['p95_ms']:.1f} | {h['n']} | |",
        f"| `kb search --json` processes | {p['p50_ms']:.0f} | {p['p95_ms']:.0f} | {p['n']} | "
        f"{p['p50_ms'] / i['p50_ms']:.1f}x |",
        "",
        f"Server hits differing from the in-process ones: {s['hits_differ']} of {v['n']}; "
        f"non-200 answers: {len(s['failed'])}.",
        "",
        "| concurrent | requests | ok | other answers | client errors | wall s | "
        "latency min / p50 / p95 / max ms |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for name, key in (
        ("searches", "concurrent_searches"),
        ("searches, again", "concurrent_searches_again"),
        ("uploads (into a copy)", "concurrent_uploads"),
    ):
        c = r[key]
        other = {k: n for k, n in c["by_status"].items() if k not in ("200", "201")}
        lat = c["latency"]
        lines.append(
            f"| {name} | {c['requests']} | {c['ok']} | {other or '-'} | {c['client_errors']} | "
            f"{c['wall_s']:.2f} | "
            + (
                f"{lat['min_ms']:.0f} / {lat['p50_ms']:.0f} / {lat['p95_ms']:.0f} / "
                f"{lat['max_ms']:.0f}"
                if lat
                else "-"
            )
            + " |"
        )
    u = r["concurrent_uploads"]
    lines.append("")
    lines.append(
        f"Uploads: {u['distinct_documents']} distinct document ids answered, "
        f"{u['documents_added']} documents added to the copy."
    )
    for name in ("search_server", "upload_server"):
        server = r[name]
        states = "; ".join(
            f"{when}: {st['fds']} fds, {st['threads']} threads, {st['rss_mib']:.0f} MiB"
            for when, st in server["states"].items()
        )
        lines.append(
            f"{name.replace('_', ' ')}: exit {server['exit_code']}, "
            f"{server['stderr_lines']} stderr lines; {states}"
        )
        for line in server["stderr_tail"][-5:]:
            lines.append(f"    {line}")
    for key in ("concurrent_searches", "concurrent_searches_again", "concurrent_uploads"):
        for sample in r[key]["client_error_samples"] + r[key]["error_bodies"]:
            lines.append(f"  {key}: {sample}")
    if "breakdown_ms" in r:
        lines += ["", "One request's steps in process (p50 ms):"]
        lines += [f"  {name}: {ms:.2f}" for name, ms in r["breakdown_ms"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k", help="scale.py's SQLite home of this size")
    parser.add_argument("--home", type=Path, help="another home (a SQLite one) instead")
    parser.add_argument("--questions", type=int, default=120, help="timed in process and served")
    parser.add_argument("--warmup", type=int, default=5, help="questions asked first, untimed")
    parser.add_argument("--process-questions", type=int, default=10, help="`kb search` runs")
    parser.add_argument("--concurrent", type=int, default=200, help="searches at once")
    parser.add_argument("--uploads", type=int, default=50, help="uploads at once")
    parser.add_argument("--breakdown", action="store_true", help="time one request's steps")
    parser.add_argument("--quick", action="store_true", help="a tiny home of the corpora")
    parser.add_argument("--output", type=Path, help="the JSON result (DATA/serve-latest.json)")
    args = parser.parse_args()
    if args.quick:
        args.questions, args.process_questions = min(args.questions, 40), 3
    os.environ.update(ONE_THREAD)
    result = run(args)
    print(report(result))
    if args.output or not args.quick:
        output = args.output or homes.DATA / "serve-latest.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result, indent=1))
        print(f"\nwritten to {output}")


if __name__ == "__main__":
    main()
