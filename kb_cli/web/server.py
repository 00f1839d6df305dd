"""Running the HTTP app: uvicorn on a socket kb binds itself, so that `--port 0` takes
a free port and the caller learns which before the first request; SIGINT or SIGTERM
stops it gracefully (requests in flight are answered, then the process exits 0).
Uploads are received in a scratch directory of the server's own, removed when it
stops, and by the next server when it was killed."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn

from kb_cli.config import Settings
from kb_cli.web import events, routes


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, on_ready: Callable[[], None], streams: events.Streams
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
    # IPPROTO_TCP named, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only
    # on sockets that say so, and without it every answer, whose body uvicorn sends
    # after its head, waited 40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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
    streams = events.Streams()
    with scratch_directory() as scratch:
        config = uvicorn.Config(
            routes.build(settings, scratch, streams),
            log_config=None,  # kb says what it serves on; requests are not logged
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=10,
        )
        _Server(config, on_ready, streams).run(sockets=[sock])


SCRATCH_PREFIX = "kb-serve-"


@contextlib.contextmanager
def scratch_directory() -> Iterator[Path]:
    """A directory of this server's own in the temporary directory, named by its
    process id, for the uploads it receives; removed at its stop. Those of servers that
    no longer run (killed: what they held was never stored) are removed first."""
    for stale in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = stale.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if pid.isdigit() and _own_directory(stale) and not _running(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether `pid` is a process this one can see (of this process namespace: a server
    in another namespace that shares the directory makes its scratch again, see
    routes.received_in)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number no process has
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _own_directory(path: Path) -> bool:
    """A directory (not a link to one) of this user: never remove anything else."""
    try:
        status = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid()
