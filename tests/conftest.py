"""Every test gets its own KB_HOME in tmp_path: a real SQLite file (a copy of one kb's
migrations made once per test process, with a database id of its own) and an object
directory; on PostgreSQL, a database of its own (a copy likewise); a pure test gets no
database, a test marked `empty_database` starts from none. The tests of a module that
only read a knowledge base share one built once (build_home, enter_home).

Fixtures only; what tests share otherwise is in tests/helpers.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from tests.docgen import many_part_mail
from tests.helpers import (
    ON_POSTGRES,
    ON_S3,
    POSTGRES_ADMIN_URL,
    STRIPPED,
    Result,
    SharedHome,
    clean_env,
    copy_s3_objects,
    disconnect_postgres,
    home_digest,
    home_runner,
    migrated_postgres_template,
    migrated_sqlite_file,
    postgres_database,
    run_in_process,
    sqlite_home_from,
)
from tests.loopback import OpenAIEmbeddings, openai_variables, s3_server, s3_store_env, serving

UNIT_TESTS = Path(__file__).parent / "unit"


@pytest.fixture(scope="session", autouse=True)
def _bytecode_cache(tmp_path_factory: pytest.TempPathFactory):
    """Let the many `kb` subprocesses share compiled bytecode (in a temp dir, not the tree).

    Purely a speed-up: with PYTHONDONTWRITEBYTECODE set, every subprocess would
    recompile whatever has no .pyc yet. A cache the caller names (.ci/run's, shared by
    its test runs) is kept; otherwise the test processes of a run share one (what one's
    `kb` processes compiled, the other's need not compile again).
    """
    cache = os.environ.get("PYTHONPYCACHEPREFIX")
    if not cache:
        run = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp/popen-gwN: the run's is above
            run = run.parent
        (run / "pycache").mkdir(exist_ok=True)
        cache = str(run / "pycache")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", cache)
        yield


@pytest.fixture(scope="session")
def ten_thousand_part_mail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mail of 10,000 one-byte attachments."""
    path = tmp_path_factory.mktemp("mail") / "ten-thousand-parts.eml"
    path.write_bytes(many_part_mail(10_000))
    return path


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The loopback S3-compatible server of this test process, started on first use."""
    with s3_server() as endpoint:
        yield endpoint


# Pure tests (their place is tests/unit) never open a database: on PostgreSQL they get
# none, and this name, so that one that tried would fail at once.
NO_DATABASE = "kbt_pure_test_has_no_database"


@pytest.fixture(autouse=True)
def kb_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """This test's KB_HOME (tmp_path/kbhome), its current directory tmp_path. The home
    holds a migrated database, as kb's first command would have left it, unless the test
    is pure (tests/unit), enters a shared home, or is marked `empty_database`: then there
    is no home until kb makes one (on PostgreSQL, a database without kb's tables)."""
    for name in STRIPPED:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "kbhome"
    monkeypatch.setenv("KB_HOME", str(home))
    if ON_S3:
        for name, value in s3_store_env(request.getfixturevalue("s3_endpoint")).items():
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    if "enter_home" in request.fixturenames:  # its database is the shared home's
        yield home
        return
    if request.path.is_relative_to(UNIT_TESTS):
        if ON_POSTGRES:
            monkeypatch.setenv(
                "DATABASE_URL", f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{NO_DATABASE}"
            )
        yield home
        return
    empty = request.node.get_closest_marker("empty_database") is not None
    if not ON_POSTGRES:
        if not empty:
            sqlite_home_from(request.getfixturevalue("migrated_sqlite"), home)
        yield home
        return
    template = None if empty else request.getfixturevalue("migrated_template")
    with postgres_database(template, own_identity=template is not None) as url:
        monkeypatch.setenv("DATABASE_URL", url)
        yield home


@pytest.fixture(scope="session")
def migrated_template() -> Iterator[str]:
    """On PostgreSQL, the database every test's own is a copy of (kb's schema, no rows)."""
    with migrated_postgres_template() as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """On SQLite, the database file every test's home starts with a copy of (kb's schema,
    no rows), made once per test process."""
    return migrated_sqlite_file(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="session")
def build_home(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[[Callable[..., object]], SharedHome]]:
    """build_home(builder, **variables) -> SharedHome: a new knowledge base, built by
    `builder(invoke, root)` (`invoke` as the fixture's, on that base; `root` a directory
    for its files), for the tests of a module to share through `enter_home`; `variables`
    are set while it is built and in every test that enters it."""
    with contextlib.ExitStack() as databases:

        def build(builder: Callable[..., object], **variables: str) -> SharedHome:
            root = tmp_path_factory.mktemp(builder.__name__)
            env = {"KB_HOME": str(root / "kbhome"), **variables}
            if ON_POSTGRES:
                env["DATABASE_URL"] = databases.enter_context(postgres_database())
            else:
                sqlite_home_from(request.getfixturevalue("migrated_sqlite"), root / "kbhome")
            if ON_S3:
                env.update(s3_store_env(request.getfixturevalue("s3_endpoint")))
            value = builder(home_runner(clean_env(keep_engine=False, **env)), root)
            if not ON_POSTGRES:
                return SharedHome(env, value)
            template = env["DATABASE_URL"]
            disconnect_postgres(template)
            env["DATABASE_URL"] = databases.enter_context(postgres_database(template))
            return SharedHome(env, value, template_url=template)

        yield build


@pytest.fixture(scope="session")
def engine_env(request: pytest.FixtureRequest) -> Iterator[Callable[[], dict[str, str]]]:
    """engine_env() -> the variables that put a module fixture's `kb` processes on the
    engine and store under test: a database and an S3 prefix of their own on those
    passes, nothing on SQLite with a directory store (the home decides)."""
    with contextlib.ExitStack() as databases:

        def make() -> dict[str, str]:
            env = {}
            if ON_POSTGRES:
                env["DATABASE_URL"] = databases.enter_context(postgres_database())
            if ON_S3:
                env.update(s3_store_env(request.getfixturevalue("s3_endpoint")))
            return env

        yield make


@pytest.fixture
def enter_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kb_home: Path
) -> Iterator[Callable[..., object]]:
    """enter_home(home, writes=False) -> what home's builder returned: this test's kb is
    now the shared `home` (a test that only reads; checked unchanged at its end), or with
    writes=True a copy of it of its own (its directory, database and objects)."""
    with contextlib.ExitStack() as copies:
        readers: list[tuple[SharedHome, dict]] = []

        def enter(home: SharedHome, writes: bool = False) -> object:
            env = dict(home.env)
            if writes:
                if Path(home.env["KB_HOME"]).exists():  # no file at all on PostgreSQL with S3
                    shutil.copytree(home.env["KB_HOME"], kb_home, dirs_exist_ok=True)
                env["KB_HOME"] = str(kb_home)
                if home.template_url:
                    env["DATABASE_URL"] = copies.enter_context(postgres_database(home.template_url))
                if ON_S3:
                    env["OBJECT_STORE_ROOT"] = os.environ["OBJECT_STORE_ROOT"]
                    copy_s3_objects(home.env["OBJECT_STORE_ROOT"], env["OBJECT_STORE_ROOT"])
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            if not writes:
                readers.append((home, home_digest(home)))
            return home.value

        yield enter
        for home, digest in readers:
            assert home_digest(home) == digest, "a test that only reads changed the shared home"


@pytest.fixture
def kb(kb_home: Path) -> Kb:
    """The service layer on this test's home, in process."""
    return Kb.open(resolve_settings(), actor="tester")


@pytest.fixture
def invoke():
    """Run the real CLI in this process (fast enough for large matrices), in this test's
    environment; `token` is KB_TOKEN for that one command (none by default)."""

    def run(*args: str, token: str | None = None) -> Result:
        env = dict(os.environ)
        env.pop("KB_TOKEN", None)
        if token is not None:
            env["KB_TOKEN"] = token
        return run_in_process(*args, env=env)

    return run


@pytest.fixture
def embedding_server(monkeypatch):
    """An OpenAI-compatible embedding server on loopback, and KB_EMBEDDINGS=openai
    pointing at it (tests/loopback.py, OpenAIEmbeddings)."""
    OpenAIEmbeddings.failure, OpenAIEmbeddings.delay, OpenAIEmbeddings.requests = None, 0.0, []
    with serving(OpenAIEmbeddings) as port:
        for name, value in openai_variables(port).items():
            monkeypatch.setenv(name, value)
        yield OpenAIEmbeddings
