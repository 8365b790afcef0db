"""Searches running while another thread adds, updates and removes APIs see one catalog state, never a mix.

A writer thread cycles the engine through four catalog states (add two APIs, update one of them and a
base API, remove both, restore the base API) for a bounded time while reader threads search (sync,
batch and async). Every answer must equal, exactly (ids, ranks) and up to float rounding (scores), the
answer of an engine built from scratch on one of the states current during that search.

Checked against the pre-snapshot engine (issue 11, item 9): it fails here with wrong ids, short
rankings, ``IndexError`` or bm25s' "k larger than the number of available scores".
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.stages import Stage, StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

DURATION_S = 0.6  # per engine: the module runs in about 5 s
TOP_K = 5

X1 = ToolSpec("Astro/Scope/zebra_scan", "zebra_scan", "Point the zebra telescope at a quasar", tool="Scope")
X1_V2 = ToolSpec("Astro/Scope/zebra_scan", "zebra_scan", "Brew espresso with the lunar kettle", tool="Scope")
X2 = ToolSpec("Astro/Scope/nebula_map", "nebula_map", "Chart a nebula with the zebra telescope", tool="Scope")
B = "Maps/GeoFind/geocode"
B_V2 = ToolSpec(B, "geocode", "Translate pizza orders into latitude and longitude", tool="GeoFind", category="Maps")

QUERIES = [
    "zebra telescope quasar",
    "espresso lunar kettle",
    "chart a nebula",
    "translate pizza orders",
    "convert a street address into latitude and longitude",
    "send an email message",
    "weather forecast in a city",
]


def _mutations(base: Catalog) -> list[Callable[[Engine], None]]:
    """One cycle: each step leads to the next state; after the last the engine is back at the base state."""
    b_v1 = base[B]
    return [
        lambda e: e.add([X1, X2]),
        lambda e: e.update([X1_V2, B_V2]),
        lambda e: e.remove([X1.id, X2.id]),
        lambda e: e.update([b_v1]),
    ]


def _states(base: Catalog) -> list[Catalog]:
    """The catalog after 0, 1, 2, 3 steps of the cycle (state 4 == state 0)."""
    s0 = base.copy()
    s1 = s0.copy()
    s1.add([X1, X2])
    s2 = s1.copy()
    s2.update([X1_V2, B_V2])
    s3 = s2.copy()
    s3.remove([X1.id, X2.id])
    return [s0, s1, s2, s3]


Answer = list[tuple[str, int, float]]


def _answer(results: list[ScoredTool]) -> Answer:
    return [(r.id, r.rank, r.score) for r in results]


def _same(a: Answer, b: Answer) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1] == y[1] and abs(x[2] - y[2]) <= 1e-4 * max(1.0, abs(y[2])) for x, y in zip(a, b)
    )


class _AsyncIdentity(Stage):
    """A stage with its own ``arun``: ``asearch`` then takes the natively async path of the engine."""

    name = "async_identity"

    def run(self, query, candidates, ctx, trace):  # type: ignore[no-untyped-def]
        # real stages read the context: every candidate must come from the catalog this search sees
        stray = [c.id for c in candidates if ctx.catalog.get(c.id) is not c.tool]
        if stray:
            raise RuntimeError(f"candidates {stray} are not the context catalog's APIs")
        return candidates

    async def arun(self, query, candidates, ctx, trace):  # type: ignore[no-untyped-def]
        return self.run(query, candidates, ctx, trace)


def _config(kind: str) -> EngineConfig:
    if kind == "bm25+async_stage":
        from pydantic import BaseModel

        class _NoParams(BaseModel):
            pass

        register_stage_type(
            "test_async_identity", StageType(_NoParams, lambda cfg, ctx, path: _AsyncIdentity()), replace=True
        )
        return EngineConfig(retriever="bm25", depth=TOP_K, stages=[StageSpec(type="test_async_identity")])
    if kind == "dense+tgr":  # the stage's index state (the graph) must match the catalog the search sees
        tgr = StageSpec(type="tgr", params={"expansion": {"enabled": True}})
        return EngineConfig(retriever="dense", depth=TOP_K, stages=[tgr])
    return EngineConfig(retriever=kind)  # type: ignore[arg-type]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every few microseconds so that a reader lands inside a mutation often."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid", "bm25+async_stage", "dense+tgr"])
def test_searches_during_mutations_see_one_catalog_state(kind: str, fast_switching: None) -> None:
    base = tiny_catalog()
    states = _states(base)
    expected = [
        {q: _answer(Engine.build(s, _config(kind), embedder=FakeEmbedder()).search(q, TOP_K)) for q in QUERIES}
        for s in states
    ]
    # the states really differ for the targeted queries, so a mix cannot pass by accident
    assert expected[0]["zebra telescope quasar"] != expected[1]["zebra telescope quasar"]
    assert expected[1]["espresso lunar kettle"] != expected[2]["espresso lunar kettle"]
    assert expected[2]["translate pizza orders"][0][0] == B
    assert expected[0]["translate pizza orders"] != expected[2]["translate pizza orders"]

    engine = Engine.build(base.copy(), _config(kind), embedder=FakeEmbedder())
    steps = _mutations(base)
    version = 0  # number of mutations that have returned; the engine is in state version % 4 or the next
    stop = threading.Event()
    failures: list[str] = []
    counts = {"reads": 0, "writes": 0}
    lock = threading.Lock()

    def writer() -> None:
        nonlocal version
        try:
            while not stop.is_set():
                steps[version % len(steps)](engine)
                version += 1
        except Exception as exc:  # recorded, the test fails below with the writer's error
            failures.append(f"writer: {type(exc).__name__}: {exc}")
        finally:
            counts["writes"] = version

    def check(q: str, got: Answer, v0: int, v1: int, how: str) -> None:
        allowed = [expected[v % len(states)][q] for v in range(v0, v1 + 2)]
        if not any(_same(got, a) for a in allowed):
            failures.append(f"{how} {q!r} (versions {v0}..{v1}): {got} not in {allowed}")

    def reader(seed: int) -> None:
        i = seed
        try:
            while not stop.is_set():
                q = QUERIES[i % len(QUERIES)]
                mode = i % 3
                v0 = version
                if mode == 0:
                    got = [_answer(engine.search(q, TOP_K))]
                elif mode == 1:
                    got = [_answer(r) for r in engine.search_batch([q, q], TOP_K)]
                else:
                    got = [_answer(asyncio.run(engine.asearch(q, TOP_K)))]
                v1 = version
                for g in got:
                    check(q, g, v0, v1, ("search", "search_batch", "asearch")[mode])
                with lock:
                    counts["reads"] += 1
                i += 1
        except Exception as exc:  # a raw error inside a search is a failure of the test, reported below
            failures.append(f"reader: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DURATION_S
    while time.monotonic() < deadline and not failures:
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not failures, f"{len(failures)} inconsistent searches, e.g.:\n" + "\n".join(failures[:5])
    assert counts["writes"] >= 4 and counts["reads"] >= 20, counts  # the test really interleaved work
    # the final state is the one the writer left
    final = states[counts["writes"] % len(states)]
    assert engine.catalog.ids == final.ids
    for part in engine.first_stage.parts.values():
        assert part.ids == final.ids
