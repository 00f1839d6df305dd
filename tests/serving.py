"""A real `kb serve` for tests: the server as a process on a free loopback port, and a
real HTTP client (urllib) to ask it."""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from tests.helpers import kb_env, start_kb


@dataclass
class Answer:
    status: int
    body: object
    headers: dict[str, str]


class Client:
    def __init__(
        self, url: str, process: subprocess.Popen | None = None, token: str | None = None
    ) -> None:
        self.url, self.process, self.token = url, process, token

    def as_(self, token: str | None) -> Client:
        return Client(self.url, self.process, token)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> Answer:
        headers = dict(headers or {})
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, body, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Answer(
                    response.status,
                    json.loads(response.read()),
                    {k.lower(): v for k, v in response.headers.items()},
                )
        except urllib.error.HTTPError as error:
            return Answer(
                error.code,
                json.loads(error.read()),
                {k.lower(): v for k, v in error.headers.items()},
            )

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, path: str) -> Answer:
        return self.request("POST", path, b"")

    def delete(self, path: str) -> Answer:
        return self.request("DELETE", path)

    def upload(
        self, files: dict[str, bytes], base: str | None = None, **fields: str | list[str]
    ) -> Answer:
        """POST /api/documents: multipart/form-data, one `files` part per file, then the
        fields (`base`, and each of `fields`, a list repeated)."""
        boundary = uuid.uuid4().hex
        parts = []
        for name, data in files.items():
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
                f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
            )
            parts.append(head.encode() + data + b"\r\n")
        if base is not None:
            fields["base"] = base
        for field, values in fields.items():
            for value in [values] if isinstance(values, str) else values:
                head = f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"\r\n\r\n'
                parts.append(f"{head}{value}\r\n".encode())
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        content_type = f"multipart/form-data; boundary={boundary}"
        return self.request("POST", "/api/documents", body, {"Content-Type": content_type})


def address(process: subprocess.Popen, timeout: float = 30) -> str:
    """The URL a starting `kb serve --json` says it listens on, once it is ready."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "kb serve printed no address"
    record = json.loads(process.stdout.readline())
    assert record["host"] == "127.0.0.1" and record["port"] > 0
    return record["url"]


@contextlib.contextmanager
def serving(**env: str) -> Iterator[Client]:
    """`kb serve --port 0 --json` in this test's home; SIGTERM at the end, which it
    answers by stopping cleanly (exit 0)."""
    process = start_kb("serve", "--port", "0", "--json", env=kb_env(**env))
    try:
        yield Client(address(process), process)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
