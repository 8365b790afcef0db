"""Crash safety of ``Engine.save``: a save killed (SIGKILL) at any instant leaves the old or the new engine.

A helper process (``python -c SERVER``) imports the library and builds two engines once, then forks one child
per save attempt; the child is killed either after a random delay or, deterministically, just before its
K-th file-system operation (``os.rename``, ``os.replace``, ``os.mkdir``, ``os.fsync``, ``os.unlink``,
``os.rmdir``): the child wraps those functions of the ``os`` module, a test-only patch that lives in this file,
not in the library. After every attempt the test loads the path and checks that it is exactly the engine that
was there before or the one being saved (search results compared), that temporaries stay bounded, and, after
the next successful save, that none are left.

Against the previous implementation (rename the old folder away, then the new one in) these tests fail: a kill
between the two renames leaves nothing at the path (``Engine.load`` raises), and killed saves leave
``.eng.tmp-*`` folders that no later save removes.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolrerank_plugins import Engine, PersistenceError
from toolrerank_plugins.persistence import LOCK_FILE, POINTER_FILE, version_dir
from toolrerank_plugins.testing import FakeEmbedder

pytestmark = pytest.mark.skipif(
    os.name != "posix" or not hasattr(os, "fork"), reason="needs fork() and SIGKILL (POSIX)"
)

#: Builds the two engines, in this process and in the helper (identically: same code).
BUILD = """
from toolrerank_plugins import Engine, EngineConfig, ToolSpec
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

def build_engines():
    base = tiny_catalog()
    extra = ToolSpec(id="Dining/TableBook/book", name="book", description="book a table at a restaurant tonight")
    cats = {"A": base, "B": Catalog([*base, extra], edges=base.edges)}
    return {k: Engine.build(c, EngineConfig(retriever="hybrid"), embedder=FakeEmbedder()) for k, c in cats.items()}
"""

SERVER = (
    BUILD
    + r"""
import os, shutil, signal, sys, time
from pathlib import Path

ENGINES = build_engines()
OPS = ("rename", "replace", "mkdir", "fsync", "unlink", "rmdir")

def install_hooks(kill_before):
    # Count file-system operations; SIGKILL this process just before operation number kill_before.
    state = {"n": 0}
    for name in OPS:
        real = getattr(os, name)
        def wrapper(*a, _real=real, **k):
            state["n"] += 1
            if state["n"] == kill_before:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*a, **k)
        setattr(os, name, wrapper)
    return state

def save(variant, path):
    ENGINES[variant].save(path, overwrite=True)

print("ready", flush=True)
for line in sys.stdin:
    cmd, variant, path, mode, arg = line.split("\t")
    arg = float(arg)
    if cmd == "count":  # a full save in this process, counting the operations
        real = {n: getattr(os, n) for n in OPS}
        state = install_hooks(-1)
        try:
            save(variant, path)
        finally:
            for n, f in real.items():
                setattr(os, n, f)
        print("counted", state["n"], flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if mode == "before":
                install_hooks(int(arg))
            save(variant, path)
        except BaseException as exc:
            print(f"child error: {exc!r}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    if mode == "sleep":
        time.sleep(arg)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)  # reaped: its pid no longer runs
    if os.WIFSIGNALED(status):
        print("killed", os.WTERMSIG(status), flush=True)
    else:
        print("exited", os.WEXITSTATUS(status), flush=True)
"""
)

QUERIES = ["weather forecast", "send email to bob", "book a restaurant table", "change my email address"]


def _signature(engine: Engine) -> list[list[tuple[str, float]]]:
    return [[(r.id, round(r.score, 6)) for r in engine.search(q, 5)] for q in QUERIES]


class SaveServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            raise RuntimeError(f"save helper died (exit {self.proc.poll()})")
        return line

    def _send(self, *fields: object) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\t".join(str(f) for f in fields) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def count(self, variant: str, path: Path) -> int:
        reply = self._send("count", variant, path, "none", 0)
        assert reply.startswith("counted "), reply
        return int(reply.split()[1])

    def save(self, variant: str, path: Path, mode: str = "none", arg: float = 0) -> str:
        return self._send("save", variant, path, mode, arg)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server() -> Iterator[SaveServer]:
    s = SaveServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def expected() -> dict[str, list[list[tuple[str, float]]]]:
    ns: dict[str, object] = {}
    exec(BUILD, ns)
    engines = ns["build_engines"]()  # type: ignore[operator]
    sigs = {k: _signature(e) for k, e in engines.items()}
    assert sigs["A"] != sigs["B"]  # the two engines are told apart by their results
    return sigs


def _state(path: Path, expected: dict[str, list[list[tuple[str, float]]]]) -> str | None:
    """Which engine loads from ``path`` ("A" or "B"), or None when nothing is saved there."""
    try:
        engine = Engine.load(path, embedder=FakeEmbedder())
    except PersistenceError:
        assert not os.path.lexists(path), f"{path} exists but does not load"
        return None
    sig = _signature(engine)
    matches = [k for k, s in expected.items() if s == sig]
    assert matches, f"{path} loads an engine that is neither the old nor the new one"
    return matches[0]


def _temporaries(path: Path) -> list[str]:
    inside = [p.name for p in path.iterdir() if p.name not in (LOCK_FILE, POINTER_FILE)] if path.is_dir() else []
    beside = [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    committed = [version_dir(path).name] if path.is_dir() else []
    return sorted(n for n in inside if n not in committed) + sorted(beside)


def _assert_clean_after_save(path: Path) -> None:
    assert _temporaries(path) == [], f"temporaries left after a successful save: {_temporaries(path)}"
    assert sorted(p.name for p in path.iterdir()) == sorted([LOCK_FILE, POINTER_FILE, version_dir(path).name])


def _other(variant: str | None) -> str:
    return "A" if variant == "B" else "B"


def test_overwrite_killed_before_every_file_operation_leaves_old_or_new(
    server: SaveServer, expected: dict[str, list[list[tuple[str, float]]]], tmp_path: Path
) -> None:
    path = tmp_path / "eng"
    n_ops = server.count("A", path)  # the first save: from nothing
    n_ops = server.count("B", path)  # an overwrite: what the loop below kills at each step
    assert n_ops >= 10
    state = _state(path, expected)
    assert state == "B"
    seen = set()
    # A save removes what killed ones left, so the number of operations varies: go on until one finishes.
    for k in range(1, 3 * n_ops):
        target = _other(state)
        reply = server.save(target, path, "before", k)
        assert reply in ("killed 9", "exited 0"), (k, reply)
        new_state = _state(path, expected)
        assert new_state in (state, target), f"killed before operation {k}: {new_state} not {state} or {target}"
        seen.add("new" if new_state == target else "old")
        # Stale temporaries never pile up: each save removes the ones dead writers left.
        assert len(_temporaries(path)) <= 2, (k, _temporaries(path))
        state = new_state
        if reply == "exited 0":
            assert state == target
            break
    else:
        raise AssertionError(f"no save finished within {3 * n_ops} operations")
    assert k > 10 and seen == {"old", "new"}  # the kill points span the commit
    assert server.save(_other(state), path) == "exited 0"
    assert _state(path, expected) == _other(state)
    _assert_clean_after_save(path)


def test_first_save_killed_before_every_file_operation_leaves_nothing_or_the_engine(
    server: SaveServer, expected: dict[str, list[list[tuple[str, float]]]], tmp_path: Path
) -> None:
    n_ops = server.count("A", tmp_path / "probe")
    outcomes = set()
    for k in range(1, n_ops + 2):
        path = tmp_path / f"eng{k}"
        server.save("A", path, "before", k)
        state = _state(path, expected)  # never a half-written folder at path
        assert state in (None, "A"), (k, state)
        outcomes.add(state)
        if k % 4 == 0:  # (not every time: CI time) the next save cleans what the killed one left
            assert server.save("B", path) == "exited 0"
            assert _state(path, expected) == "B"
            _assert_clean_after_save(path)
    assert outcomes == {None, "A"}


def test_switch_from_the_single_folder_layout_killed_at_every_step(
    server: SaveServer, expected: dict[str, list[list[tuple[str, float]]]], tmp_path: Path
) -> None:
    server.count("A", tmp_path / "src")
    legacy = tmp_path / "legacy-template"
    shutil.copytree(version_dir(tmp_path / "src"), legacy)  # config.json at the root: the earlier layout
    assert version_dir(legacy) == legacy and _state(legacy, expected) == "A"
    probe = tmp_path / "probe"
    shutil.copytree(legacy, probe)
    n_ops = server.count("B", probe)
    outcomes = set()
    for k in range(1, n_ops + 2):
        path = tmp_path / f"eng{k}"
        shutil.copytree(legacy, path)
        server.save("B", path, "before", k)
        state = _state(path, expected)
        assert state in ("A", "B"), (k, state)
        outcomes.add(state)
        if k % 4 == 0:  # (not every time: CI time)
            assert server.save("A", path) == "exited 0"
            assert _state(path, expected) == "A"
            _assert_clean_after_save(path)
            assert not (path / "config.json").exists()  # the single-folder files are gone once switched
    assert outcomes == {"A", "B"}


def test_random_sigkills_during_saves_leave_old_or_new_and_no_temporaries(
    server: SaveServer, expected: dict[str, list[list[tuple[str, float]]]], tmp_path: Path
) -> None:
    path = tmp_path / "eng"
    t0 = time.perf_counter()
    server.save("A", path)
    duration = time.perf_counter() - t0  # one save, as the helper runs it (plus a little overhead)
    seed = int(os.environ.get("TOOLRERANK_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    state = _state(path, expected)
    outcomes = []
    for i in range(24):
        target = _other(state)
        reply = server.save(target, path, "sleep", rng.uniform(0, 1.3 * duration))
        new_state = _state(path, expected)
        assert new_state in (state, target), f"seed {seed}, attempt {i}: {new_state} not {state} or {target}"
        assert len(_temporaries(path)) <= 2, (seed, i, _temporaries(path))
        outcomes.append((reply.split()[0], new_state == target))
        state = new_state
    assert server.save(_other(state), path) == "exited 0"
    _assert_clean_after_save(path)
    assert any(r == "killed" for r, _ in outcomes), f"seed {seed}: no save was killed"
