"""Relaying events: events a `kb relay` delivers per second to a loopback receiver."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from benchmarks.harness import PY, Context, Row, bench_engines, env_for, fill_queue, fresh_home

TITLE = "relay"


def run(ctx: Context) -> list[Row]:
    """Events a `kb relay` delivers per second to a loopback receiver that answers at
    once, against the same POSTs sent by a bare client loop (the HTTP floor)."""
    import http.client
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    work, sizes = ctx.work, ctx.sizes

    class Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        received = 0

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            Receiver.received += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    count = 200 if sizes.runs == 1 else 2000
    rows = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    try:
        for engine, admin_url in bench_engines():
            home, url = fresh_home(work, admin_url)
            extra = {"DATABASE_URL": url, "KB_RELAY_SECRET": "bench"}
            fill_queue(home, count, extra)  # one task.queued event per document
            Receiver.received = 0
            started = time.perf_counter()
            relay = subprocess.Popen(
                [PY, "-m", "kb_cli", "relay", "--webhook", f"http://127.0.0.1:{port}/"],
                env=env_for(home, **extra),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while Receiver.received < count:
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            relay.terminate()
            relay.wait()
            client = http.client.HTTPConnection("127.0.0.1", port)
            body = json.dumps({"event_id": 1, "type": "task.queued", "data": {}}).encode()
            floor_started = time.perf_counter()
            for _ in range(count):
                client.request("POST", "/", body, {"Content-Type": "application/json"})
                client.getresponse().read()
            floor = count / (time.perf_counter() - floor_started)
            client.close()
            rows.append(
                Row(
                    f"{engine}, events delivered per second ({count} events)",
                    count / elapsed,
                    floor,
                    "events/s",
                    "reported",
                    "signed, one POST each, marked delivered one by one; includes start-up; "
                    "reference: the same POSTs from a bare client",
                )
            )
    finally:
        server.shutdown()
        server.server_close()
    return rows
