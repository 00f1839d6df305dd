"""`kb work` on small tasks run together (kb_cli/worker/batch.py): the log and the
`--json` lines read as if the tasks ran one after the other, each task's lines
together, in claim order, every stage line of the contract included."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import STAGES, kb_json
from tests.helpers import kb_checked as kb


def test_a_batch_is_logged_task_by_task_in_claim_order(tmp_path: Path):
    paths = []
    for i in range(5):
        path = tmp_path / f"note-{i}.txt"
        path.write_text(f"Note {i} about invoices and ledgers.\n")
        paths.append(path)
    queued = [kb_json("upload", path, "--submit")[0] for path in paths]
    result = kb("work", "--drain", "--worker-id", "w", "--json")
    claimed = [line for line in result.records if line["claimed"]]
    assert [line["task_id"] for line in claimed] == [task["task_id"] for task in queued]
    assert [line["task"]["status"] for line in claimed] == ["succeeded"] * 5
    assert result.records[-1]["claimed"] is False

    log = result.stderr.splitlines()
    starts = [i for i, line in enumerate(log) if line.startswith("claimed task=")]
    assert len(starts) == 5
    for task, start, end in zip(queued, starts, [*starts[1:], len(log)], strict=True):
        block = log[start:end]
        task_id = task["task_id"]
        assert block[0] == f"claimed task={task_id} worker=w status=running attempt=1"
        assert block[1].startswith(f"document={task['document_id']} ")
        finished = f"finished task={task_id} status=succeeded attempt=1"
        assert finished in block
        stages = [m.group(1) for line in block if (m := re.match(r"stage=(\w+) \d+/\d+$", line))]
        assert list(dict.fromkeys(stages)) == list(STAGES)  # every stage, in order
        assert block.index(finished) > max(
            i for i, line in enumerate(block) if line.startswith("stage=finalizing")
        )
