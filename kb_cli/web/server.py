"""Running the HTTP app: uvicorn on a socket kb binds itself, so that `--port 0` takes
a free port and the caller learns which before the first request; SIGINT or SIGTERM
stops it gracefully (requests in flight are answered, then the process exits 0)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator

import uvicorn

from kb_cli.config import Settings
from kb_cli.web import routes


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, on_ready: Callable[[], None], streams: routes.Streams
    ) -> None:
        super().__init__(config)
        self.on_ready, self.streams = on_ready, streams

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Event streams never end by themselves: they are ended first, so that a stop
        waits only for the requests in flight."""
        self.streams.stop_all()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's handlers (a signal asks for a graceful stop), without raising the
        signal again afterwards: a stop asked for is the command's clean end. Ready is
        said once they are in place, so that a Ctrl-C right after it stops as cleanly."""
        with super().capture_signals():
            self.on_ready()
            yield
            self._captured_signals.clear()


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); an address in use or not
    this host's is the caller's to report."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def serve(settings: Settings, sock: socket.socket, on_ready: Callable[[], None]) -> None:
    """Answer requests on `sock` until SIGINT or SIGTERM. `on_ready` runs once the app
    is built and the signals are handled, before the first request is read (those that
    come earlier wait in the socket's backlog)."""
    streams = routes.Streams()
    config = uvicorn.Config(
        routes.build(settings, streams),
        log_config=None,  # kb says what it serves on; requests are not logged
        access_log=False,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    _Server(config, on_ready, streams).run(sockets=[sock])
