"""An OpenAI-compatible embeddings endpoint (OpenAI, Ollama, vLLM,
text-embeddings-inference): POST {base}/embeddings with {"model", "input": [...]}.

Failures are sorted by what the operator should do: an unreachable server, a time-out,
429 or 5xx may pass by themselves (ProviderUnavailable: the task is retried with
backoff); any other refusal means the configuration is wrong (ProviderRejected: the
task fails at once). Messages name the HTTP status and the server's reason, never the
API key or the request.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from kb_cli.errors import ProviderRejected, ProviderUnavailable

if TYPE_CHECKING:
    import numpy as np

_REASON_LIMIT = 200


class OpenAICompatibleEmbedder:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        batch_size: int = 64,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.endpoint = base_url.rstrip("/") + "/embeddings"
        self.model_name = model
        self.api_key = api_key
        self.batch_size = batch_size
        self.timeout_seconds = timeout_seconds

    @property
    def model(self) -> str:
        return f"openai:{self.model_name}"

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        data = self._post({"model": self.model_name, "input": texts})
        try:
            items = sorted(data["data"], key=lambda item: item["index"])
            vectors = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise ProviderRejected(
                "the embedding server's answer is not an OpenAI embeddings response"
            ) from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ProviderRejected(
                f"the embedding server returned {len(vectors)} vectors for {len(texts)} texts"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def _post(self, payload: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.endpoint, data=json.dumps(payload).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise _refusal(error.code, _reason(error, self.api_key)) from None
        except TimeoutError:
            raise ProviderUnavailable(
                f"the embedding server did not answer within {self.timeout_seconds:g} s"
            ) from None
        except (urllib.error.URLError, ConnectionError) as error:
            cause = getattr(error, "reason", error)
            if isinstance(cause, TimeoutError):
                raise ProviderUnavailable(
                    f"the embedding server did not answer within {self.timeout_seconds:g} s"
                ) from None
            name = type(cause).__name__
            raise ProviderUnavailable(f"cannot reach the embedding server ({name})") from None
        try:
            return json.loads(body)
        except ValueError:
            raise ProviderRejected("the embedding server's answer is not JSON") from None


def _refusal(status: int, reason: str) -> Exception:
    message = f"the embedding server answered HTTP {status}" + (f": {reason}" if reason else "")
    if status == 429 or status >= 500:
        return ProviderUnavailable(message)
    advice = {
        401: "check KB_EMBEDDING_API_KEY",
        403: "check KB_EMBEDDING_API_KEY",
        404: "check KB_EMBEDDING_URL and KB_EMBEDDING_MODEL",
    }.get(status, "check KB_EMBEDDING_MODEL and KB_EMBEDDING_URL")
    return ProviderRejected(f"{message}; {advice}")


_SECRET = re.compile(r"(?i)\b(?:sk|key|bearer)[-_: ]+\S+")


def _reason(error: urllib.error.HTTPError, api_key: str | None) -> str:
    """The server's own error message (OpenAI: {"error": {"message": ...}}), short,
    with anything like a key blanked: servers echo (parts of) a rejected key."""
    try:
        body = error.read(4096)
        detail = json.loads(body).get("error", "")
        if isinstance(detail, dict):
            detail = detail.get("message", "")
        text = str(detail)
    except (ValueError, AttributeError, OSError):
        text = ""
    if api_key:
        text = text.replace(api_key, "***")
    return _SECRET.sub("***", " ".join(text.split()))[:_REASON_LIMIT]
