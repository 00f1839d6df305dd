"""A real HTTP server on loopback for provider tests: the handler answers JSON."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    def read_json(self):
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send_json(self, status: int, payload) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[JsonHandler]) -> Iterator[int]:
    """Serve `handler` on a free loopback port (yielded) until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


class FlakyEmbeddings(JsonHandler):
    """OpenAI-compatible /v1/embeddings that answers 503 while `failures_left` is above
    zero, then tiny vectors at once (so that a caller's time is its own work)."""

    failures_left = 0

    def do_POST(self) -> None:
        texts = self.read_json()["input"]
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_json(503, {"error": {"message": "overloaded, try later"}})
            return
        data = [{"index": i, "embedding": [1.0, len(t) % 5 + 1.0]} for i, t in enumerate(texts)]
        self.send_json(200, {"data": data, "model": "flaky"})
