"""Several OS processes on one PostgreSQL store: readers during a writer's transactions see the catalog before or
after each change, never a mix; a writer killed mid-transaction loses nothing committed; the server restarting
mid-session is survived (a stopped one is a clear StoreError)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from toolrerank_plugins import Engine
from toolrerank_plugins.errors import StoreError
from toolrerank_plugins.postgres import connect_engine, postgres_config
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

PIZZA = (  # one line: it is pasted into an indented script
    '[ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza for delivery", tool="Pizza"), '
    'ToolSpec(id="Food/Pizza/track", name="track_pizza", description="track my pizza delivery", tool="Pizza")]'
)

_PRELUDE = """
import json, sys, time
import toolrerank_plugins.retrieval.postgres as pgmod
from toolrerank_plugins.postgres import connect_engine
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder
URI, TABLE = sys.argv[1], sys.argv[2]
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _build(uri: str, table: str) -> Engine:
    cfg = postgres_config(table=table, poll_interval=0.0, timeout=3.0)
    return Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(), resources={"postgres": uri})


def test_readers_in_other_processes_never_see_half_a_change(pg_server: Any, table: str) -> None:
    _build(pg_server.uri, table)
    writer = _python(
        f"""
        real_put = pgmod._put_meta
        def slow_put(conn, meta, key, value):  # hold each transaction open, rows written, before it commits
            real_put(conn, meta, key, value)
            if key == "version":
                time.sleep(0.05)
        pgmod._put_meta = slow_put
        engine = connect_engine(URI, table=TABLE, embedder=FakeEmbedder())
        pizza = {PIZZA}
        for _ in range(25):
            engine.add(pizza)
            engine.remove([s.id for s in pizza])
        print("done")
        """,
        pg_server.uri,
        table,
    )
    reader_code = """
        engine = connect_engine(URI, table=TABLE, embedder=FakeEmbedder())
        seen, bad, t0 = {}, [], time.time()
        while time.time() - t0 < 60:
            ids = [r.id for r in engine.search("order a pizza for delivery", top_k=5)]
            n = sum(i.startswith("Food/Pizza/") for i in ids)
            known = sum(i in engine.catalog for i in ("Food/Pizza/order", "Food/Pizza/track"))
            seen[n] = seen.get(n, 0) + 1
            if n not in (0, 2) or known not in (0, 2):
                bad.append((ids, known))
            if open(sys.argv[3]).read():
                break
        print(json.dumps({"seen": seen, "bad": bad[:5]}))
    """
    flag = pg_server.data.parent / f"{table}.done"
    flag.write_text("")
    readers = [_python(reader_code, pg_server.uri, table, str(flag)) for _ in range(2)]
    out, err = writer.communicate(timeout=240)
    assert writer.returncode == 0 and "done" in out, err[-3000:]
    flag.write_text("done")
    for reader in readers:
        rout, rerr = reader.communicate(timeout=120)
        assert reader.returncode == 0, rerr[-3000:]
        result = json.loads(rout.strip().splitlines()[-1])
        assert result["bad"] == []
        assert int(result["seen"].get("2", 0)) > 0 and int(result["seen"].get("0", 0)) > 0  # saw both states


def test_a_writer_killed_mid_transaction_loses_nothing_committed(pg_server: Any, table: str) -> None:
    engine = _build(pg_server.uri, table)
    writer = _python(
        """
        engine = connect_engine(URI, table=TABLE, embedder=FakeEmbedder())
        engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")])
        print("committed A", flush=True)
        real_put = pgmod._put_meta
        def stuck_put(conn, meta, key, value):
            real_put(conn, meta, key, value)
            if key == "version":
                print("holding B", flush=True)
                time.sleep(120)
        pgmod._put_meta = stuck_put
        engine.add([ToolSpec(id="Food/Pizza/track", name="track_pizza", description="track my pizza")])
        """,
        pg_server.uri,
        table,
    )
    assert writer.stdout is not None
    lines = []
    deadline = time.time() + 120
    while "holding B" not in lines and time.time() < deadline:
        lines.append(writer.stdout.readline().strip())
    assert lines[-1] == "holding B", (lines, writer.stderr.read() if writer.poll() is not None else "")
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    after = connect_engine(pg_server.uri, table=table, embedder=FakeEmbedder())
    assert "Food/Pizza/order" in after.catalog and "Food/Pizza/track" not in after.catalog
    engine.add([ToolSpec(id="Food/Pizza/menu", name="pizza_menu", description="the pizza menu")])  # not locked out
    assert connect_engine(pg_server.uri, table=table, embedder=FakeEmbedder()).catalog.ids == engine.catalog.ids


def test_a_server_restart_mid_session_is_survived(pg_server: Any, table: str) -> None:
    engine = _build(pg_server.uri, table)
    query = "send an email message"
    before = [r.id for r in engine.search(query, 3)]
    pg_server.restart()
    assert [r.id for r in engine.search(query, 3)] == before  # the dead pooled connection is replaced
    engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")])
    pg_server.stop()
    try:
        with pytest.raises(StoreError, match=rf"PostgreSQL store '{table}'"):
            engine.search("order a pizza", 1)
    finally:
        pg_server.start()
    # the pool reconnects in the background with psycopg_pool's backoff (1 s, doubling while the server was
    # down): until then a search is a clear StoreError, never a wrong result; then it works again
    deadline = time.monotonic() + 60
    while True:
        try:
            found = engine.search("order a pizza", 1)
            break
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert found[0].id == "Food/Pizza/order"
    assert json.dumps(engine.config.model_dump(mode="json")).count("postgresql://") == 0
