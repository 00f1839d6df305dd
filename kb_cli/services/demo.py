"""`kb demo`: the whole lifecycle on the bundled samples, in a fresh temporary home.

Two real worker processes race for every task (exactly one wins), the damaged PDF
fails with `parse_error`, is replaced and retried, one task is cancelled mid-run,
the good documents (a PDF, a DOCX, Markdown, a slide deck and a spreadsheet among them)
are published and searched in English and Chinese.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.errors import InternalError
from kb_cli.parsers import kind_for_filename
from kb_cli.services import documents, search, tasks

RACERS = ("worker-A", "worker-B")
DAMAGED, REPLACEMENT, CANCELLED = "damaged.pdf", "handbook.pdf", "faq.txt"
# Questions, not keywords: hybrid search ranks chunks by their words and their meaning.
QUERIES = (
    "How long do we keep invoices?",
    "文档什么时候才能被搜索到？",
    "When does the offline index ship?",  # a slide's speaker notes
)


@dataclass(frozen=True)
class DemoEvent:
    step: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "message": self.message, **self.data}


@dataclass
class DocumentOutcome:
    filename: str
    document_id: str
    task_id: str
    won_by: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = ""
    task_status: str = ""
    attempt: int = 0
    error_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": "summary",
            "filename": self.filename,
            "document_id": self.document_id,
            "task_id": self.task_id,
            "document_status": self.status,
            "task_status": self.task_status,
            "attempt": self.attempt,
            "error_code": self.error_code,
            "claimed_by": self.won_by,
            "outcome": self.notes,
        }


def samples_dir() -> Path:
    """The samples shipped in the wheel, or those of a source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "sample_docs", package.parent / "sample_docs"):
        if candidate.is_dir():
            return candidate
    raise InternalError("the bundled sample documents are missing from this installation")


def run_demo(
    emit: Callable[[DemoEvent], None], keep: bool = False, stage_delay: float = 0.3
) -> list[DocumentOutcome]:
    home = Path(tempfile.mkdtemp(prefix="kb-demo-"))
    try:
        demo = _Demo(home, emit, stage_delay)
        outcomes = demo.run()
    finally:
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
    if keep:
        emit(
            DemoEvent(
                "keep", f"the demo home is kept: kb --home {home} status", {"home": str(home)}
            )
        )
    return outcomes


class _Demo:
    def __init__(self, home: Path, emit: Callable[[DemoEvent], None], stage_delay: float):
        self.home = home
        self.emit = emit
        self.stage_delay = stage_delay
        self.settings = resolve_settings(
            str(home), f"sqlite:///{home / 'kb.sqlite3'}", str(home / "objects")
        )
        self.kb = Kb.open(self.settings, actor="demo")
        self.outcomes: dict[str, DocumentOutcome] = {}

    def run(self) -> list[DocumentOutcome]:
        started = time.monotonic()
        self._upload()
        for outcome in self.outcomes.values():
            if outcome.filename != CANCELLED:
                self._race(outcome)
        self._cancel_mid_run(self.outcomes[CANCELLED])
        self._replace_and_retry(self.outcomes[DAMAGED])
        self._publish()
        self._search()
        self._collect()
        self.emit(
            DemoEvent(
                "done",
                f"demo finished in {time.monotonic() - started:.1f} s",
                {"seconds": round(time.monotonic() - started, 2)},
            )
        )
        return list(self.outcomes.values())

    def _upload(self) -> None:
        paths = sorted(
            path for path in samples_dir().iterdir() if kind_for_filename(path.name) is not None
        )
        records = documents.upload_files(self.kb, paths, submit=True)
        for path, task in zip(paths, records, strict=True):
            self.outcomes[path.name] = DocumentOutcome(path.name, task.document_id, task.task_id)
        self.emit(
            DemoEvent(
                "upload",
                f"uploaded and submitted {len(paths)} sample documents",
                {"files": [path.name for path in paths]},
            )
        )

    def _race(self, outcome: DocumentOutcome, delay: float = 0.0) -> dict[str, Any]:
        """Start both workers on the same task; exactly one claims it."""
        racers = [self._start_worker(name, outcome.task_id, delay) for name in RACERS]
        return self._finish_race(outcome, racers)

    def _start_worker(self, name: str, task_id: str, delay: float) -> subprocess.Popen[str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KB_TOKEN", "DATABASE_URL", "OBJECT_STORE_ROOT", "KB_HOME")
        }
        if env.pop("PYTHONDONTWRITEBYTECODE", None):
            # Without bytecode, each of the demo's dozen workers would compile all its
            # imports again; they share compiled files in the demo's own home instead.
            env["PYTHONPYCACHEPREFIX"] = str(self.home / "pycache")
        command = [
            sys.executable,
            "-m",
            "kb_cli",
            "--home",
            str(self.home),
            "--database-url",
            self.settings.database_url,
            "--object-store",
            str(self.settings.object_store),
            "work",
            task_id,
            "--worker-id",
            name,
            "--json",
            "--stage-delay",
            str(delay),
        ]
        return subprocess.Popen(
            command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def _finish_race(
        self, outcome: DocumentOutcome, racers: list[subprocess.Popen[str]]
    ) -> dict[str, Any]:
        results = []
        for racer in racers:
            out, err = racer.communicate(timeout=120)
            if racer.returncode != 0 or not out.strip():
                raise InternalError(f"a demo worker failed: {err.strip()[-300:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        [winner] = [result for result in results if result["claimed"]]
        loser = next(result["worker_id"] for result in results if not result["claimed"])
        task: dict[str, Any] = winner["task"]
        outcome.won_by.append(winner["worker_id"])
        if task["status"] != "cancelled":
            outcome.notes.append(
                f"{task['status']}" + (f" with {task['error_code']}" if task["error_code"] else "")
            )
        detail = f" ({task['error_code']})" if task["error_code"] else ""
        self.emit(
            DemoEvent(
                "race",
                f"{outcome.filename}: {winner['worker_id']} won the claim, {loser} missed; "
                f"task {task['status']}{detail}",
                {
                    "filename": outcome.filename,
                    "task_id": outcome.task_id,
                    "winner": winner["worker_id"],
                    "loser": loser,
                    "status": task["status"],
                    "attempt": task["attempt"],
                    "error_code": task["error_code"],
                },
            )
        )
        return task

    def _cancel_mid_run(self, outcome: DocumentOutcome) -> None:
        racers = [self._start_worker(name, outcome.task_id, self.stage_delay) for name in RACERS]
        stage = self._wait_until_running(outcome.task_id)
        tasks.cancel_task(self.kb, outcome.task_id)
        self.emit(
            DemoEvent(
                "cancel",
                f"{outcome.filename}: cancelled mid-run, at its {stage} stage",
                {"filename": outcome.filename, "task_id": outcome.task_id, "stage": stage},
            )
        )
        self._finish_race(outcome, racers)
        outcome.notes.append("cancelled mid-run")

    def _wait_until_running(self, task_id: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = tasks.get_task(self.kb, task_id)
            if record.status == "running" and record.stage != "download":
                return record.stage
            time.sleep(0.05)
        raise InternalError("the demo task never started running")

    def _replace_and_retry(self, outcome: DocumentOutcome) -> None:
        # The fixed file keeps its name, as when a person repairs a file and uploads it
        # again: search and the summary then name the same document.
        fixed = self.home / "repaired" / outcome.filename
        fixed.parent.mkdir()
        shutil.copyfile(samples_dir() / REPLACEMENT, fixed)
        replaced = documents.replace_file(self.kb, fixed, outcome.document_id)
        retried = tasks.retry_task(self.kb, outcome.task_id)
        self.emit(
            DemoEvent(
                "retry",
                f"{outcome.filename}: replaced with a repaired copy (revision "
                f"{replaced.revision}) and retried: the same task, queued again after "
                f"attempt {retried.attempt}",
                {
                    "filename": outcome.filename,
                    "task_id": outcome.task_id,
                    "revision": replaced.revision,
                    "attempt": retried.attempt,
                },
            )
        )
        outcome.notes.append("replaced and retried")
        self._race(outcome)

    def _publish(self) -> None:
        published = []
        for outcome in self.outcomes.values():
            record = documents.document_record_for(self.kb, outcome.document_id)
            if record.status == "review_pending":
                documents.publish_document(self.kb, outcome.document_id, record.version)
                outcome.notes.append("published")
                published.append(outcome.filename)
        self.emit(
            DemoEvent(
                "publish", f"published {len(published)} reviewed documents", {"files": published}
            )
        )

    def _search(self) -> None:
        by_id = {outcome.document_id: outcome for outcome in self.outcomes.values()}
        for query in QUERIES:
            hits = search.search(self.kb, search.SearchRequest(query, 3, per_document=True)).hits
            for hit in hits:
                note = "found by search"
                if note not in by_id[hit.document_id].notes:
                    by_id[hit.document_id].notes.append(note)
            found = ", ".join(
                f"{hit.filename} chunk {hit.chunk_index}{_ranks(hit)}" for hit in hits
            )
            self.emit(
                DemoEvent(
                    "search",
                    f"{query!r}: {found or 'no hits'}",
                    {"query": query, "hits": [hit.to_dict() for hit in hits]},
                )
            )

    def _collect(self) -> None:
        with self.kb.db.read() as conn:
            for outcome in self.outcomes.values():
                document = queries.existing_document(conn, outcome.document_id)
                task = queries.existing_task(conn, document.latest_task_id or "")
                outcome.status, outcome.task_status = document.status, task.status
                outcome.attempt, outcome.error_code = task.attempt, task.error_code


def _ranks(hit) -> str:
    """Which rankings found the hit: words (BM25), meaning (vectors), or both."""
    found = [
        f"{name} #{rank}"
        for name, rank in (("words", hit.lexical_rank), ("meaning", hit.vector_rank))
        if rank
    ]
    return f" ({', '.join(found)})" if found else ""
