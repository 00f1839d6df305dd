"""Objects between the store and the database: stored but not yet named by a committed
document, or no longer named and not yet deleted (table `pending_objects`, migration
0014).

A command records the keys it is about to store, committed, before it writes them
(`reserve`); the transaction that commits the documents naming them removes the rows
(`settle`); a replace records the superseded file in the transaction that stops naming
it (`release`) and removes the row after deleting the object (`discard`). Each row names
the process that owns it (host, pid, and the process's start time, so a reused pid is
not mistaken for it). An object no document names is then either pending, with a live
owner that will settle or delete it, or abandoned by a killed owner, which the next
command on that host that stores an object deletes (`clean_abandoned`) and `kb doctor`
reports (`abandoned_object`) until then; never an orphan.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.db import Connection, format_stamp
from kb_cli.errors import BusyError, InternalError
from kb_cli.queries import PendingObject
from kb_cli.store import layout

# A row of another host's process cannot be checked; after this long it counts as
# abandoned (as an object older than it counts as an orphan; kb_cli/services/doctor.py).
OTHER_HOST_GRACE_SECONDS = 600

RUNNING, ABANDONED, UNKNOWN = "running", "abandoned", "unknown"
# How many keys `Keys` reserves in one transaction, and how many rows it drops in one.
KEYS_AT_ONCE = 32


def reserve(kb: Kb, count: int) -> list[str]:
    """`count` fresh object keys, recorded as this process's before any is written."""
    keys = [layout.new_key() for _ in range(count)]
    if keys:
        with kb.db.write() as conn:
            queries.insert_pending_objects(conn, keys, this_process(), kb.timestamp())
    return keys


class Keys:
    """Keys for a command that stores one object after another (`kb sync`): reserved
    KEYS_AT_ONCE at a time, and the rows of the objects it deleted dropped as many at a
    time, so a changed file costs no commit of its own for them. Until `close`, the rows
    of keys not used yet, or of objects deleted already, are this live process's (no
    problem for doctor); after a kill, the next command cleans them up."""

    def __init__(self, kb: Kb) -> None:
        self.kb = kb
        self.spare: list[str] = []
        self.deleted: list[str] = []

    def take(self) -> str:
        if not self.spare:
            self.spare = reserve(self.kb, KEYS_AT_ONCE)
        return self.spare.pop()

    def delete(self, key: str) -> None:
        """Delete an object no committed document names any longer (release'd)."""
        self.kb.store.delete(key)
        self.deleted.append(key)
        if len(self.deleted) >= KEYS_AT_ONCE:
            self._forget()

    def close(self) -> None:
        """The rows of unused keys (never written) and of deleted objects."""
        self.deleted += self.spare
        self.spare = []
        self._forget()

    def _forget(self) -> None:
        if self.deleted:
            with self.kb.db.write() as conn:
                queries.delete_pending_objects(conn, self.deleted)
            self.deleted = []


def settle(conn: Connection, keys: Iterable[str]) -> None:
    """In the transaction that commits the documents naming `keys`: no longer pending."""
    queries.delete_pending_objects(conn, list(keys))


def release(conn: Connection, key: str, now: str) -> None:
    """In the transaction that stops naming `key`: this process deletes it after commit
    (`discard`), or the next command does, should this one be killed first."""
    queries.insert_pending_objects(conn, [key], this_process(), now)


def discard(kb: Kb, keys: Iterable[str]) -> None:
    """Delete objects no committed document names, then their rows. Called as a failed
    command cleans up: when the database is what failed, the rows stay, and the next
    command on this host drops them (their objects are gone already); the error the
    caller raises is the one that matters."""
    keys = list(keys)
    for key in keys:
        kb.store.delete(key)
    if keys:
        with contextlib.suppress(InternalError, BusyError), kb.db.write() as conn:
            queries.delete_pending_objects(conn, keys)


def clean_abandoned(kb: Kb) -> list[str]:
    """Delete what commands killed on this host left pending (before this command stores
    anything): the keys deleted."""
    with kb.db.read() as conn:
        rows = queries.pending_objects(conn)
    dead = [row.object_key for row in rows if on_this_host(row) and state(row, kb) == ABANDONED]
    _drop(kb, dead, quarantine=False)
    return dead


def repair(kb: Kb, key: str) -> bool:
    """`kb doctor --repair` of an abandoned object: deleted when its owner was on this
    host (it is gone for sure); moved to the quarantine when it was on another (which may
    only be slow), as an orphan is."""
    with kb.db.read() as conn:
        row = next((r for r in queries.pending_objects(conn) if r.object_key == key), None)
    if row is None or state(row, kb) != ABANDONED:
        return False
    _drop(kb, [key], quarantine=not on_this_host(row))
    return True


def _drop(kb: Kb, keys: list[str], quarantine: bool) -> None:
    """Objects (and the temporary objects a killed write left) out of the store, then
    their rows; never an object a document names."""
    if not keys:
        return
    with kb.db.read() as conn:
        referenced = set(queries.object_keys(conn))
    for key in keys:
        if key in referenced:
            continue
        if quarantine and kb.store.exists(key):
            kb.store.quarantine(key)
        kb.store.delete(key)
        kb.store.delete(layout.temporary_key(key))
    with kb.db.write() as conn:
        queries.delete_pending_objects(conn, keys)


def state(row: PendingObject, kb: Kb) -> str:
    """RUNNING while its process lives, ABANDONED once it is gone; for another host's
    process, UNKNOWN until OTHER_HOST_GRACE_SECONDS have passed, then ABANDONED."""
    host, pid, started = _parts(row.process)
    if host == socket.gethostname():
        return RUNNING if _alive(pid, started) else ABANDONED
    cutoff = format_stamp(kb.clock.now() - timedelta(seconds=OTHER_HOST_GRACE_SECONDS))
    return ABANDONED if row.created_at < cutoff else UNKNOWN


def on_this_host(row: PendingObject) -> bool:
    return _parts(row.process)[0] == socket.gethostname()


def describe(row: PendingObject) -> str:
    host, pid, _started = _parts(row.process)
    return f"process {pid} on {host}"


@functools.cache
def this_process() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _parts(process: str) -> tuple[str, int, str]:
    host, pid, started = process.rsplit(":", 2)
    return host, int(pid), started


def _start_time(pid: int) -> str:
    """When the process started, in clock ticks since boot (field 22 of /proc/PID/stat);
    "" where there is no /proc, or no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str) -> bool:
    if started:
        return _start_time(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
