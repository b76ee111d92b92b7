"""A real PostgreSQL server for the tests that need one: Debian's PostgreSQL 15 (scripts/setup.sh
installs it), started in a temporary directory, listening on a unix socket only, as the
`postgres` user when the tests run as root (PostgreSQL refuses to run as root; CI runs as
root), stopped by its PID. One server per module (`postgres` fixture, module scope); each
test gets a database of its own (`postgres_url`)."""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


class Postgres:
    """A server in `workdir` (its data and socket); `url(db)` the SQLAlchemy URL of a database."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket_dir = workdir / "socket"
        self.process: subprocess.Popen | None = None
        self._names = itertools.count(1)
        self._owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    def _as_owner(self) -> dict:
        """Popen's arguments that run a command as `postgres` (when root)."""
        if self._owner is None:
            return {}
        return {"user": self._owner.pw_uid, "group": self._owner.pw_gid, "extra_groups": [],
                "env": {**os.environ, "HOME": self._owner.pw_dir}}

    def start(self) -> None:
        data = self.workdir / "data"
        self.socket_dir.mkdir()
        if self._owner:
            for path in (self.workdir, self.socket_dir):
                os.chown(path, self._owner.pw_uid, self._owner.pw_gid)
        subprocess.run([str(POSTGRES_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, cwd=self.workdir,
                       **self._as_owner())
        with open(self.workdir / "postgres.log", "wb") as log:
            self.process = subprocess.Popen(
                [str(POSTGRES_BIN / "postgres"), "-D", str(data), "-k", str(self.socket_dir),
                 "-c", "listen_addresses=", "-c", "fsync=off"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=self.workdir, **self._as_owner())
        engine = sa.create_engine(self.url("postgres"))
        try:
            for _ in range(300):
                if self.process.poll() is not None:
                    raise RuntimeError(f"postgres exited: {(self.workdir / 'postgres.log').read_text()[-2000:]}")
                try:
                    with engine.connect():
                        return
                except sa.exc.OperationalError:
                    time.sleep(0.05)
            raise RuntimeError("postgres did not accept connections within 15 s")
        finally:
            engine.dispose()

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@/{database}?host={self.socket_dir}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        name = f"t{next(self._names)}"
        engine = sa.create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(f"CREATE DATABASE {name}"))
        finally:
            engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGINT)  # fast shutdown: it ends open connections
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


def require_postgres() -> None:
    """Fail the test where Debian's PostgreSQL is missing."""
    if not (POSTGRES_BIN / "postgres").exists():
        pytest.fail(f"{POSTGRES_BIN} is missing: scripts/setup.sh installs Debian's postgresql")


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the module's tests."""
    require_postgres()
    workdir = Path(tempfile.mkdtemp(prefix="gpu-reclaim-pg-"))  # not tmp_path: root's, unreadable to postgres
    server = Postgres(workdir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres: Postgres) -> str:
    """The URL of a new empty database on the module's server."""
    return postgres.new_database()
