"""One JSON POST to a model provider (embeddings, rerank), its failures sorted by what
the operator should do: an unreachable server, a time-out, 429 or 5xx may pass by
themselves (ProviderUnavailable: transient); any other refusal means the configuration
is wrong (ProviderRejected). Messages name the HTTP status and the server's reason,
never the API key or the request."""

from __future__ import annotations

import http.client
import json
import re
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kb_cli.errors import ProviderRejected, ProviderUnavailable, UsageError

_REASON_LIMIT = 200
MAX_ANSWER_BYTES = 64 * 1024 * 1024
_BLOCK = 64 * 1024
_SECRET = re.compile(r"(?i)\b(?:sk|key|bearer)[-_: ]+\S+")


@dataclass(frozen=True)
class Endpoint:
    url: str
    api_key: str | None
    timeout_seconds: float
    server: str  # how messages name it: "the embedding server"
    key_variable: str  # KB_EMBEDDING_API_KEY
    config_variables: str  # what to check on 404 and other refusals

    def post(self, payload: dict[str, Any]) -> Any:
        """The decoded JSON answer to `payload`, read within `timeout_seconds` in all
        (not per socket read: a server trickling bytes is as unavailable as a silent
        one) and at most MAX_ANSWER_BYTES long."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers=headers, method="POST"
        )
        deadline = time.monotonic() + self.timeout_seconds
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                body = self._read(response, deadline)
        except urllib.error.HTTPError as error:
            raise self._refusal(error.code, _reason(error, self.api_key)) from None
        except TimeoutError:
            raise self._too_slow() from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            cause = getattr(error, "reason", error)
            if isinstance(cause, TimeoutError):
                raise self._too_slow() from None
            name = type(cause).__name__
            raise ProviderUnavailable(f"cannot reach {self.server} ({name})") from None
        try:
            return json.loads(body)
        except ValueError:
            raise ProviderRejected(f"{self.server}'s answer is not JSON") from None

    def _read(self, response, deadline: float) -> bytes:
        body = bytearray()
        while block := response.read1(_BLOCK):
            body += block
            if len(body) > MAX_ANSWER_BYTES:
                raise ProviderRejected(f"{self.server}'s answer is over {MAX_ANSWER_BYTES} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError
        return bytes(body)

    def _too_slow(self) -> ProviderUnavailable:
        return ProviderUnavailable(
            f"{self.server} did not answer within {self.timeout_seconds:g} s"
        )

    def _refusal(self, status: int, reason: str) -> Exception:
        message = f"{self.server} answered HTTP {status}" + (f": {reason}" if reason else "")
        if status == 429 or status >= 500:
            return ProviderUnavailable(message)
        if status in (401, 403):
            advice = f"check {self.key_variable}"
        else:
            advice = f"check {self.config_variables}"
        return ProviderRejected(f"{message}; {advice}")


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
    # Only printable characters: a server's text must not drive the user's terminal.
    text = "".join(char for char in text if unicodedata.category(char)[0] != "C")
    return _SECRET.sub("***", " ".join(text.split()))[:_REASON_LIMIT]


def check_url(url: str, variable: str) -> str:
    """`url` when http.client can send a request to it: http(s), a host whose name
    (or address) it can encode, a port from 1 to 65535, no space, control or non-ASCII
    character in the path or query. Else a usage error naming `variable` and what to
    fix, found before any request: such a URL would fail on every attempt."""
    problem = url_problem(url)
    if problem:
        raise UsageError(f"{variable} {problem}")
    return url


_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")


def url_problem(url: str) -> str | None:
    """What is wrong with `url` as an http(s) URL to post to, or None."""
    example = "must be an http:// or https:// URL, e.g. http://127.0.0.1:8080/path"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # an unclosed [IPv6 address, a port that is no number
        return f"{example} (its host or port cannot be read)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return example
    if port == 0:
        return "has port 0: give a port from 1 to 65535"
    if _UNSENDABLE.search(url) or (not url.isascii() and not _only_host_is_unicode(parts)):
        return (
            "must not contain spaces, control or non-ASCII characters in its path or "
            "query: percent-encode them (a space is %20)"
        )
    if not _encodable_host(parts.hostname):
        return (
            "has a host name that is not valid: labels of 1 to 63 letters, digits or "
            "hyphens, separated by single dots"
        )
    return None


def _only_host_is_unicode(parts: urllib.parse.SplitResult) -> bool:
    """An internationalised host name is fine (it is sent IDNA-encoded); any other
    non-ASCII character is not."""
    rest = parts._replace(netloc=parts.netloc.replace(parts.hostname or "", ""))
    return urllib.parse.urlunsplit(rest).isascii()


def _encodable_host(host: str) -> bool:
    """Whether a connection can be opened to `host` by name or address: the check the
    socket layer would make at the first attempt (IDNA, labels of 1 to 63 characters)."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        encoded = host.encode("idna")
    except UnicodeError:
        return False
    labels = encoded.removesuffix(b".").split(b".")  # a trailing dot: fully qualified
    return len(encoded) <= 254 and all(0 < len(label) <= 63 for label in labels)
