"""A real HTTP server on loopback for provider tests: the handler answers JSON."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


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
    # shutdown() waits for the loop's next look at its flag: every 0.05 s, not the
    # default 0.5 s that every test serving a provider or a webhook sat through.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
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


TEST_BUCKET = "kb-tests"
# moto accepts any keys unless told otherwise (tests/service/test_s3_store.py does).
TEST_KEYS = {"AWS_ACCESS_KEY_ID": "kb-test-key-id", "AWS_SECRET_ACCESS_KEY": "kb-test-secret"}


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """An S3-compatible server (moto) on a free loopback port, with TEST_BUCKET; yields
    its endpoint URL. Its objects live in this process's memory until the block ends."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    create_bucket(endpoint, TEST_BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


def create_bucket(endpoint: str, bucket: str) -> None:
    """What `aws s3 mb` does; moto needs no signature for it."""
    import urllib.request

    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def s3_store_env(endpoint: str, bucket: str = TEST_BUCKET) -> dict[str, str]:
    """The variables that put kb's object store on a fresh prefix of `bucket`."""
    import uuid

    return {
        "OBJECT_STORE_ROOT": f"s3://{bucket}/{uuid.uuid4().hex[:12]}",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        **TEST_KEYS,
    }


class OpenAIEmbeddings(JsonHandler):
    """Answers like OpenAI's /v1/embeddings (a 3-dimension vector made of the text's
    length and its e's), or fails as the test tells it to; `delay` seconds a request."""

    failure: tuple[int, str] | None = None
    delay: float = 0.0
    requests: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.read_json()
        type(self).requests.append({"body": body, "auth": self.headers.get("Authorization")})
        time.sleep(self.delay)
        if self.failure:
            status, message = self.failure
            self.send_json(status, {"error": {"message": message}})
            return
        data = [
            {"index": i, "embedding": [len(text) % 7 + 1.0, text.count("e") + 1.0, 1.0]}
            for i, text in enumerate(body["input"])
        ]
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a killed client
            self.send_json(200, {"data": data, "model": body["model"]})


def openai_variables(port: int) -> dict[str, str]:
    """The environment that points kb's `openai` provider at OpenAIEmbeddings."""
    return {
        "KB_EMBEDDINGS": "openai",
        "KB_EMBEDDING_URL": f"http://127.0.0.1:{port}/v1",
        "KB_EMBEDDING_MODEL": "tiny-embed",
        "KB_EMBEDDING_API_KEY": "sk-test-secret-key",
        "KB_EMBEDDING_BATCH": "2",
    }
