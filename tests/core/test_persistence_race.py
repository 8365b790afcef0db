"""Loads that race commits (probe of 2026-11-26): a load must return the engine before or after a concurrent
save, never ``current.json names version v-…, which is missing``.

The probe saw that error in 1 of 40,862 loads while another process saved in a loop: a save committed a new
version and deleted the old one between the load reading ``current.json`` and looking for the version folder
it named, and that check sat outside the load's retry. The deterministic test below interposes a whole
commit exactly there; the two-process test runs the probe's setup for a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins import Engine, EngineConfig, PersistenceError
from toolrerank_plugins import persistence as P
from toolrerank_plugins.persistence import POINTER_FILE, version_dir
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

QUERIES = ["weather forecast", "send email to bob", "change my email address"]


def _engine(depth: int, retriever: str = "hybrid") -> Engine:
    return Engine.build(
        tiny_catalog(), EngineConfig(retriever=retriever, depth=depth, stages=[]), embedder=FakeEmbedder()
    )


def _signature(engine: Engine) -> Any:
    return engine.config.depth, [[(r.id, round(r.score, 5)) for r in engine.search(q, 5)] for q in QUERIES]


def _commit_after_reading_the_pointer(monkeypatch: pytest.MonkeyPatch, path: Path, saves: list[Engine]) -> list[str]:
    """After each of the next ``len(saves)`` reads of ``path``'s pointer, commit the next engine of ``saves``
    (which deletes the version that pointer named) before the reader goes on. Returns the names read."""
    real = P.read_json
    read: list[str] = []
    busy = []

    def racing_read_json(file: Path, what: str, **options: Any) -> Any:
        data = real(file, what, **options)
        if what == POINTER_FILE and file.parent == path and saves and not busy:
            read.append(data["current"])
            busy.append(True)
            try:
                saves.pop(0).save(path, overwrite=True)  # the save reads the pointer too: not interposed
            finally:
                busy.pop()
        return data

    monkeypatch.setattr(P, "read_json", racing_read_json)
    return read


def test_a_commit_between_reading_the_pointer_and_opening_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "eng"
    _engine(5).save(path)
    newer = _engine(7)
    read = _commit_after_reading_the_pointer(monkeypatch, path, [newer])
    loaded = Engine.load(path, embedder=FakeEmbedder())  # was: "current.json names version v-000001, which is missing"
    assert read == ["v-000001"] and version_dir(path).name == "v-000002"
    assert _signature(loaded) == _signature(newer)


def test_several_commits_in_a_row_are_followed_and_a_bounded_number_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "eng"
    _engine(5).save(path)
    engines = [_engine(6 + i) for i in range(3)]
    read = _commit_after_reading_the_pointer(monkeypatch, path, list(engines))
    assert _signature(Engine.load(path, embedder=FakeEmbedder())) == _signature(engines[-1])
    assert read == ["v-000001", "v-000002", "v-000003"]
    # saves that commit after every single read of the pointer, forever: the load gives up with a library error
    endless = _engine(9)
    monkeypatch.undo()
    _commit_after_reading_the_pointer(monkeypatch, path, [endless] * 100)
    with pytest.raises(PersistenceError, match="which is missing"):
        Engine.load(path, embedder=FakeEmbedder())


def test_a_missing_version_the_pointer_still_names_is_damage_not_a_race(tmp_path: Path) -> None:
    path = tmp_path / "eng"
    _engine(5).save(path)
    (path / "v-000001").rename(tmp_path / "elsewhere")
    with pytest.raises(PersistenceError, match=r"current.json: names version v-000001, which is missing; .*damaged"):
        Engine.load(path, embedder=FakeEmbedder())


SAVER = r"""
import sys, time
from pathlib import Path
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

path, seconds = Path(sys.argv[1]), float(sys.argv[2])
engines = [
    Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", depth=d, stages=[]), embedder=FakeEmbedder())
    for d in (5, 7)
]
print("ready", flush=True)
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    engines[n % 2].save(path, overwrite=True)
    n += 1
print(n, flush=True)
"""


def _saving_in_a_loop(
    path: Path, seconds: float, load: Callable[[], bool], *, until: float | None = None
) -> tuple[int, int]:
    """Save two engines in turn at ``path`` from another process for ``seconds`` (``SAVER``) while calling
    ``load()`` in a loop (until the saver stops, or ``until`` seconds); returns (commits, loads that raced)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    saver = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    raced = 0
    try:
        assert saver.stdout is not None and saver.stdout.readline().strip() == "ready"
        end = time.monotonic() + (until if until is not None else seconds + 60)
        while time.monotonic() < end and saver.poll() is None:
            raced += load()
        out, err = saver.communicate(timeout=60)
    finally:
        if saver.poll() is None:
            saver.kill()
            saver.wait()
    assert saver.returncode == 0, err[-2000:]
    return int(out.strip()), raced


@pytest.mark.skipif(os.name != "posix", reason="POSIX rename and flock semantics")
def test_loads_in_one_process_while_another_saves_in_a_loop(tmp_path: Path) -> None:
    path = tmp_path / "eng"
    engines = {d: _engine(d, "bm25") for d in (5, 7)}
    engines[5].save(path)
    expected = {d: _signature(e) for d, e in engines.items()}
    seen: list[int] = []

    def load() -> bool:
        loaded = Engine.load(path, embedder=FakeEmbedder())
        assert _signature(loaded) == expected[loaded.config.depth]  # exactly the engine before or after, never a mix
        seen.append(loaded.config.depth)
        return True

    commits, loads = _saving_in_a_loop(path, 4, load, until=3.5)
    assert commits >= 10 and loads >= 10 and set(seen) == {5, 7}, (commits, loads, set(seen))


@pytest.mark.skipif(os.name != "posix", reason="POSIX flock semantics")
def test_a_slow_load_is_never_starved_by_saves_committing_faster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each load takes longer than several commits of a process saving in a loop (a busy machine, a large
    engine). Without pins such a load found its version deleted at every try and retried until the saves stopped
    (or ran out of tries); the version is pinned once the pointer names it, so every load returns the engine
    committed when it began."""
    path = tmp_path / "eng"
    engines = {d: _engine(d, "bm25") for d in (5, 7)}
    engines[5].save(path)
    expected = {d: _signature(e) for d, e in engines.items()}
    real = P.read_config

    def slow_read_config(root: Path) -> Any:
        time.sleep(0.15)  # the rest of the load reads a version a save would have deleted meanwhile
        return real(root)

    monkeypatch.setattr(P, "read_config", slow_read_config)
    loads = 0

    def load() -> bool:
        nonlocal loads
        before = version_dir(path).name
        loaded = Engine.load(path, embedder=FakeEmbedder())
        assert _signature(loaded) == expected[loaded.config.depth]
        loads += 1
        return version_dir(path).name != before  # a save committed during this load

    commits, raced = _saving_in_a_loop(path, 3, load)
    assert loads >= 5 and raced >= 3, (loads, raced, commits)
