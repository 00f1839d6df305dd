"""S3 object store throughput: `kb upload` (the service, store and database) and the
worker's download stage (stream, sha256, private copy for the parser) on the same files,
against a local S3-compatible server (moto, a separate process) and against the directory
store; one run, ratios. Needs the dev group (moto).

    uv run python benchmarks/s3.py            # ~1 min
    uv run python benchmarks/s3.py --quick
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kb_cli import queries  # noqa: E402
from kb_cli.app import Kb  # noqa: E402
from kb_cli.config import resolve_settings  # noqa: E402
from kb_cli.lifecycle import Stage  # noqa: E402
from kb_cli.services import documents  # noqa: E402
from kb_cli.worker.pipeline import Pipeline  # noqa: E402

MB = 1024 * 1024
# (label, file count, bytes each): many small documents, some medium, a few that go
# up as multipart uploads (over 8 MiB).
SETS = [("64 KiB", 200, 64 * 1024), ("1 MiB", 40, MB), ("24 MiB", 4, 24 * MB)]
QUICK = [("64 KiB", 10, 64 * 1024), ("1 MiB", 4, MB), ("24 MiB", 1, 24 * MB)]


class Quiet:
    """The pipeline's reporter and sink, doing nothing: only the download is timed."""

    batch = 500

    def report(self, stage: Stage, done: int, total: int) -> None:
        pass

    def checkpoint(self) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            request = urllib.request.Request(f"{endpoint}/kb-bench", method="PUT")
            urllib.request.urlopen(request, timeout=2).close()
            return server, endpoint
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def measure(work: Path, store: str, files: list[Path]) -> tuple[float, float]:
    """Seconds to upload `files` (one `kb upload` of them all), and to download each as
    a worker does."""
    os.environ["OBJECT_STORE_ROOT"] = store
    kb = Kb.open(resolve_settings(str(work / f"home-{time.monotonic_ns()}")), actor="bench")
    started = time.perf_counter()
    records = documents.upload_files(kb, files)
    uploaded = time.perf_counter() - started
    with kb.db.read() as conn:
        rows = [queries.get_document(conn, record.document_id) for record in records]
    pipeline = Pipeline(kb, Quiet(), Quiet())  # type: ignore[arg-type]
    started = time.perf_counter()
    for row in rows:
        with pipeline.download(row) as path:
            assert path.stat().st_size == row.size_bytes
    downloaded = time.perf_counter() - started
    kb.db.close()
    return uploaded, downloaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    sets = QUICK if parser.parse_args().quick else SETS
    server, endpoint = start_moto()
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        KB_MAX_UPLOAD_BYTES=str(64 * MB),
    )
    print("| files | MB | store | upload MB/s | download MB/s | S3 / directory (up, down) |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            for label, count, size in sets:
                files = []
                for i in range(count):
                    path = work / f"{label.replace(' ', '')}-{i}.txt"
                    path.write_bytes(os.urandom(size))
                    files.append(path)
                megabytes = count * size / MB
                on_disk = measure(work, str(work / f"objects-{count}"), files)
                on_s3 = measure(work, f"s3://kb-bench/{label.replace(' ', '')}", files)
                for name, (up, down) in (("directory", on_disk), ("S3 (moto)", on_s3)):
                    ratio = (
                        f"{on_disk[0] / on_s3[0]:.2f}, {on_disk[1] / on_s3[1]:.2f}"
                        if name != "directory"
                        else ""
                    )
                    print(
                        f"| {count} x {label} | {megabytes:.0f} | {name} | "
                        f"{megabytes / up:.1f} | {megabytes / down:.1f} | {ratio} |"
                    )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
