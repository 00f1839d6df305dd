"""The four retrieval corpora together in one home (no other text), with a manifest
like benchmarks/scale.py's, so benchmarks/sink.py can tell what the corpora cost each
other from what the other text costs them.

    uv run --group bench python benchmarks/sink_together.py HOME
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.retrieval import load_corpora


def main() -> None:
    home = Path(sys.argv[1])
    os.environ["KB_EMBEDDINGS"] = "local"
    corpora = load_corpora(None)
    pages = [page for corpus in corpora for page in corpus.pages]
    names = [f"{corpus.name}/{page.name}" for corpus in corpora for page in corpus.pages]
    from kb_cli.app import Kb
    from kb_cli.config import resolve_settings
    from kb_cli.services.documents import publish_document, upload_files
    from kb_cli.worker import Worker, WorkerOptions

    kb = Kb.open(resolve_settings(str(home)), actor="bench")
    tasks = upload_files(kb, pages, submit=True)
    list(Worker(kb, WorkerOptions(worker_id="bench")).run(max_tasks=None))
    for task in tasks:
        publish_document(kb, task.document_id)
    manifest = {"pages": {n: t.document_id for n, t in zip(names, tasks, strict=True)}}
    (home / "scale-manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
