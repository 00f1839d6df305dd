"""Write amplification: the commits `kb work` makes for a 1-page and a many-page PDF."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.harness import Context, Row
from tests.docgen import make_pdf, paged_text

TITLE = "write amplification"


def run(ctx: Context) -> list[Row]:
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.db import Database
    from kb_cli.services import documents
    from kb_cli.worker import Worker, WorkerOptions

    work, sizes = ctx.work, ctx.sizes

    def commits_for(pages: int) -> int:
        home = Path(tempfile.mkdtemp(dir=work))
        path = home / f"doc{pages}.pdf"
        path.write_bytes(make_pdf(paged_text(pages)))
        service = Kb.open(resolve_settings(str(home / "kb"), None, None), actor="bench")
        documents.upload_files(service, [path], submit=True)
        commits = []

        def commit(kind: str, seconds: float) -> None:  # the heartbeat's writes too
            if kind == "write":
                commits.append(seconds)

        Database.on_transaction = commit
        try:
            list(Worker(service, WorkerOptions(worker_id="bench")).run())
        finally:
            Database.on_transaction = None
        return len(commits)

    one, many = commits_for(1), commits_for(sizes.amplification_pages)
    return [
        Row(
            "commits for a 1-page PDF",
            one,
            20,
            "commits",
            "<= 20",
            "reference: the target",
        ),
        Row(
            f"commits for a {sizes.amplification_pages}-page PDF",
            many,
            one,
            "commits",
            "<= 2x the 1-page count",
            "progress writes are throttled to one per 0.25 s",
        ),
    ]
