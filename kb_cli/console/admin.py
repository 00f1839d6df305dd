"""The records of the admin commands: reindex progress and report, doctor, a new user,
bases and the schema upgrade."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    PLAIN_PROGRESS_INTERVAL,
    counted,
    emit,
    is_fancy,
    log,
    note,
    short,
    visible,
    write_json,
    write_json_lines,
)

if TYPE_CHECKING:
    from kb_cli.records import BaseRecord, BuildReport, UserRecord
    from kb_cli.services.access import NewUser
    from kb_cli.services.doctor import DoctorReport
    from kb_cli.services.reindex import ReindexReport, SwitchReport


class Progress:
    """done/total of one long job: a rich bar on a terminal, a line now and then
    otherwise (on stderr, so stdout keeps only the result); `plain=False`: nothing but
    the bar (a command whose piped output stays as it always was)."""

    def __init__(self, label: str, plain: bool = True) -> None:
        self.label = label
        self.plain = plain
        self._bar = None
        self._last = 0.0
        if is_fancy(sys.stderr):
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(console=Console(stderr=True), redirect_stdout=False)
            self._bar.start()
            self._task = self._bar.add_task(label, total=None)

    def __call__(self, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
        elif not self.plain:
            return
        elif done == total or time.monotonic() - self._last >= PLAIN_PROGRESS_INTERVAL:
            self._last = time.monotonic()
            log(f"{self.label} {done}/{total}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_reindex(reports: list[ReindexReport], as_json: bool) -> None:
    """One line (record) per model in use."""
    for report in reports:
        if as_json:
            write_json(report)
        else:
            chunks = counted(report.chunks, "chunk")
            emit(
                f"embedded {chunks} of {counted(report.revisions, 'revision')} with {report.model}"
            )


def print_switch(report: SwitchReport, as_json: bool) -> None:
    """What a base's switch of model did, and what an operator could do next."""
    if as_json:
        write_json(report)
        return
    emit(
        f"base {report.base}: model {report.model_from} -> {report.model}; "
        f"{counted(report.switched, 'chunk')} switched ({report.embedded} embedded now)"
    )
    for message in report.notes:
        note(message)


def print_vector_index(reports: list[BuildReport], as_json: bool) -> None:
    """What `kb reindex --vectors` wrote: one index file per model and dimension."""
    for report in reports:
        if as_json:
            write_json(report)
        elif report.chunks:
            size = f"{report.bytes / 2**20:.1f} MiB"
            emit(f"indexed {counted(report.chunks, 'vector')} of {report.model} ({size})")
        else:
            emit(f"no vectors of {report.model} at {report.dim} dimensions to index")
    if not reports and not as_json:
        emit("no vectors of the configured model to index")


# What a person does about each kind of problem `kb doctor` reports (a kind whose
# detail already says it, such as changed_object, has none here).
WORDS_INDEXES = {
    "pg_textsearch": "from the candidates of pg_textsearch's BM25 index",
    "gin": "from the GIN index of the stored words",
}
NEXT_STEPS = {
    "expired_lease": "a running `kb work` takes it over, or `kb doctor --repair` requeues it now",
    "orphan_object": "`kb doctor --repair` moves it to the quarantine",
    "stray_chunks": "`kb doctor --repair` deletes them",
    "vector_index": "`kb doctor --repair` or `kb reindex --vectors` rebuilds it",
    "lexical_index": "`kb doctor --repair` rebuilds it (REINDEX)",
    "stray_artefact": "`kb doctor --repair` deletes it",
    "unfinished_delete": "`kb doctor --repair` finishes the delete",
    "missing_object": "upload the file again with `kb upload FILE --replace {short}`, or check "
    "that --object-store / OBJECT_STORE_ROOT is this knowledge base's",
    "missing_base": "`kb base create BASE`, or `kb base move {short} BASE` to an existing one",
    "dangling_access": "`kb base revoke` the grant, or create what it names",
    "foreign_store": "point --object-store / OBJECT_STORE_ROOT at this knowledge base's store",
    "served_while_out": "`kb unpublish {short}` or `kb publish {short}` settles it",
    "status_pair": "`kb status {short}` shows both; `kb retry` or `kb cancel` settles the task",
    "stale_task": "`kb cancel {short}` ends it",
}


def print_doctor(report: DoctorReport, as_json: bool) -> None:
    if as_json:
        write_json(report)
        return
    for fix in report.repaired:
        emit(f"repaired {fix.kind} {fix.id}: {visible(fix.detail)}")
    for problem in report.problems:
        step = NEXT_STEPS.get(problem.kind, "").format(short=short(problem.id))
        detail = visible(problem.detail)
        emit(f"problem {problem.kind} {problem.id}: {detail}{'; ' + step if step else ''}")
    for message in report.notes:
        emit(f"note: {message}")
    if report.words_index in WORDS_INDEXES:  # PostgreSQL's two (SQLite has one)
        note(f"words are ranked {WORDS_INDEXES[report.words_index]}")
    if report.ok:
        emit("ok: every invariant holds")


def print_new_user(new_user: NewUser, as_json: bool) -> None:
    if as_json:
        write_json(new_user)
        return
    teams_shown = f" teams={','.join(new_user.teams)}" if new_user.teams else ""
    emit(f"user {new_user.user} role={new_user.role}{teams_shown}")
    emit(f"token {new_user.token}")
    log("the token is shown only once: store it now (export KB_TOKEN=...)")


def print_bases(records: list[BaseRecord], as_json: bool) -> None:
    if as_json:
        write_json_lines(records)
        return
    for record in records:
        readers = "teams " + ", ".join(record.teams) if record.teams else "everyone"
        grants = f"; granted to {', '.join(record.grants)}" if record.grants else ""
        count = counted(record.documents, "document")
        model = record.model if record.model_from == "base" else f"{record.model} (KB_EMBEDDINGS)"
        switching = f", switching to {record.switching_to}" if record.switching_to else ""
        emit(f"{record.base}: {count}; read by {readers}{grants}; model {model}{switching}")


def print_upgrade(before: str | None, after: str, as_json: bool) -> None:
    if as_json:
        write_json({"from_revision": before, "to_revision": after})
    else:
        emit(f"schema at revision {after}" + (f" (was {before})" if before != after else ""))


def print_users(records: list[UserRecord], as_json: bool) -> None:
    """One line per user: name, role, state, teams, created, last used."""
    if as_json:
        write_json_lines(records)
        return
    for record in records:
        teams = f" teams={','.join(record.teams)}" if record.teams else ""
        used = record.last_used_at or "never"
        emit(
            f"{record.user} role={record.role} {record.state}{teams}"
            f" created={record.created_at} last_used={used}"
        )
