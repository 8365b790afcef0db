"""A multi-request message's requests searched on a spare thread beside the message (``_workers``)."""

from __future__ import annotations

import contextvars
import multiprocessing
import threading
import time
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig, _workers
from toolrerank_plugins._workers import SpareThreads, sharing_cores, side_by_side, spare_threads_allowed
from toolrerank_plugins.encoders import SentenceTransformerEmbedder
from toolrerank_plugins.retrieval.dense import DenseRetriever
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

MESSAGE = "Send the email message to a recipient about the email. Additionally, tell me the weather forecast"
REQUESTS = ["Send the email message to a recipient about the email", "tell me the weather forecast"]
_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_side_by_side", default="unset")


def _config(retriever: str, parallel: bool) -> EngineConfig:
    return EngineConfig(
        retriever=retriever, parallel_requests=parallel, stages=[{"type": "multi_intent", "params": {}}]
    )


def test_no_spare_thread_on_one_cpu_and_none_while_busy() -> None:
    assert SpareThreads(0).try_submit(lambda: 1) is None
    spare = SpareThreads(1)
    release = threading.Event()
    first = spare.try_submit(release.wait, 5)
    assert first is not None
    assert spare.try_submit(lambda: 2) is None  # busy: the caller does the work itself, nothing queues
    release.set()
    assert first.result(timeout=5) is True
    deadline = time.monotonic() + 5
    while (again := spare.try_submit(lambda: 3)) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the slot is freed by the done callback, just after the result is set
    assert again is not None and again.result(timeout=5) == 3


def test_side_by_side_runs_both_only_where_allowed(one_spare: SpareThreads) -> None:
    assert side_by_side(lambda: 1, lambda: 2) is None  # outside spare_threads_allowed
    with spare_threads_allowed(False):
        assert side_by_side(lambda: 1, lambda: 2) is None
    token = _VAR.set("caller")
    try:
        with spare_threads_allowed():
            got = side_by_side(
                lambda: (threading.current_thread().name, _VAR.get(), sharing_cores()),
                lambda: (threading.current_thread().name, _VAR.get(), sharing_cores()),
            )
    finally:
        _VAR.reset(token)
    assert got is not None
    (here, here_var, here_sharing), (there, there_var, there_sharing) = got
    assert here == threading.current_thread().name and there.startswith("toolrerank-spare")
    assert (here_var, there_var) == ("caller", "caller")  # the spare thread runs in a copy of the context
    assert here_sharing and there_sharing and not sharing_cores()


def test_an_error_leaves_only_after_the_other_half_ended(one_spare: SpareThreads) -> None:
    ended = threading.Event()

    def slow() -> int:
        time.sleep(0.2)
        ended.set()
        return 1

    def fails() -> int:
        raise ValueError("here")

    with spare_threads_allowed(), pytest.raises(ValueError, match="here"):
        side_by_side(fails, slow)
    assert ended.is_set()
    with spare_threads_allowed(), pytest.raises(KeyError):
        side_by_side(lambda: 1, lambda: {}["missing"])


def _child(spare: SpareThreads, out: Any) -> None:
    future = spare.try_submit(lambda: 41 + 1)
    forgot = _workers._SPARE is None  # the process's own spare threads are made again in a child
    out.put((future.result(timeout=10) if future is not None else None, forgot))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this OS")
def test_a_forked_child_makes_its_own_spare_threads() -> None:
    _workers.spare_threads()  # the parent's, made before the fork
    spare = SpareThreads(1)
    held = threading.Event()
    busy = spare.try_submit(held.wait, 10)  # the parent's thread is busy when the child is forked
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(spare, out))
    proc.start()
    try:
        assert out.get(timeout=30) == (42, True)
    finally:
        held.set()
        proc.join(30)
    assert busy is not None and busy.result(timeout=5)


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_parallel_requests_rank_as_one_thread_does(retriever: str, one_spare: SpareThreads) -> None:
    queries = [MESSAGE, "weather forecast for Oslo", "tell me the weather. Also send an email to Bob"]
    rankings = []
    for parallel in (True, False):
        emb = FakeEmbedder()
        engine = Engine.build(tiny_catalog(), _config(retriever, parallel), embedder=emb)
        before = len(emb.threads)
        rankings.append(
            [[(h.id, round(h.score, 9)) for h in engine.search(q, top_k=6)] for q in queries]
            + [[(h.id, round(h.score, 9)) for h in r] for r in engine.search_batch(queries, top_k=6)]
        )
        spare_calls = [t for t in emb.threads[before:] if t.startswith("toolrerank-spare")]
        assert bool(spare_calls) is parallel  # the requests were encoded on the spare thread, or never there
    assert rankings[0] == rankings[1]


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_a_flat_index_searches_the_message_and_its_requests_in_one_call_after_both_encodes(
    retriever: str, one_spare: SpareThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In memory (``searches_jointly``): the spare thread only encodes the requests, and the caller searches
    every vector in one call (a flat scan then reads the stored vectors once). A store that searches each vector
    apart (pgvector: ``searches_jointly = False``) keeps a search on each thread. The rankings are the same."""
    calls: list[tuple[str, int]] = []
    search_vectors = DenseRetriever._search_vectors

    def recording(self: DenseRetriever, vectors: np.ndarray, depth: int, **kwargs: Any) -> Any:
        calls.append((threading.current_thread().name, len(vectors)))
        return search_vectors(self, vectors, depth, **kwargs)

    monkeypatch.setattr(DenseRetriever, "_search_vectors", recording)
    me = threading.current_thread().name
    rankings = []
    for jointly in (True, False):
        monkeypatch.setattr(DenseRetriever, "searches_jointly", jointly)
        emb = FakeEmbedder()
        engine = Engine.build(tiny_catalog(), _config(retriever, True), embedder=emb)
        calls.clear()
        before = len(emb.threads)
        rankings.append([(h.id, round(h.score, 9)) for h in engine.search(MESSAGE, top_k=6)])
        encoded_on = sorted(t.startswith("toolrerank-spare") for t in emb.threads[before:])
        assert encoded_on == [False, True]  # the message here, its two requests there
        if jointly:
            assert calls == [(me, 3)]
        else:
            assert sorted((name == me, n) for name, n in calls) == [(False, 2), (True, 1)]
    serial = Engine.build(tiny_catalog(), _config(retriever, False), embedder=FakeEmbedder())
    assert rankings[0] == rankings[1] == [(h.id, round(h.score, 9)) for h in serial.search(MESSAGE, top_k=6)]


def test_a_subclass_with_its_own_vector_search_gets_the_joint_search_through_it(one_spare: SpareThreads) -> None:
    seen: list[int] = []

    class Recording(DenseRetriever):
        def search_vectors(self, vectors: np.ndarray, depth: int) -> list[list[Any]]:
            seen.append(len(vectors))
            return super().search_vectors(vectors, depth)

    retriever = Engine.build(tiny_catalog(), _config("dense", True), embedder=FakeEmbedder()).first_stage
    plain = retriever.search([MESSAGE, *REQUESTS], 6)
    retriever.__class__ = Recording
    with spare_threads_allowed():
        got = retriever.search_side_by_side_then([MESSAGE], [REQUESTS], 6, lambda: "then")
    assert got is not None and seen == [3]
    whole, parts, after = got
    assert (whole, parts, after) == (plain[:1], [plain[1:]], "then")


def test_the_joint_search_takes_both_cores_even_where_faiss_has_one_thread(
    one_spare: SpareThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both threads' cores belong to the search until it returns: its one search of several vectors takes two
    threads where faiss's count is one (``OMP_NUM_THREADS=1``), while a search of several vectors of its own keeps
    faiss's count."""
    faiss = pytest.importorskip("faiss")
    from toolrerank_plugins.retrieval import dense

    seen: list[tuple[int, int]] = []
    exact_search = dense.exact_search

    def recording(index: Any, vectors: np.ndarray, k: int, threads: int, **kwargs: Any) -> Any:
        seen.append((len(vectors), threads))
        return exact_search(index, vectors, k, threads, **kwargs)

    monkeypatch.setattr(dense, "exact_search", recording)
    engine = Engine.build(tiny_catalog(), _config("hybrid", True), embedder=FakeEmbedder())
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        engine.search(MESSAGE, top_k=6)
        engine.first_stage.parts["dense"].search(REQUESTS, 6)
    finally:
        faiss.omp_set_num_threads(before)
    assert seen == [(3, 2), (2, 1)]


def test_a_message_without_requests_never_uses_the_spare_thread(one_spare: SpareThreads) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("hybrid", True), embedder=emb)
    before = len(emb.threads)
    engine.search("weather forecast for Oslo", top_k=3)  # one request: one plain search on the caller
    assert emb.threads[before:] == [threading.current_thread().name]


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two physical cores, whatever the machine has."""
    monkeypatch.setattr(_workers, "usable_cores", lambda: 2)


@pytest.mark.parametrize(
    ("cores", "alone", "beside"),
    [
        (2, 1, 1),  # this machine, one torch thread: one each
        (2, 2, 1),  # two threads on two cores: the halves split them
        (4, 2, 2),  # four cores: each half keeps its two threads
        (4, 4, 2),
        (3, 2, 1),  # not a core for every thread of both halves: half
        (16, 16, 8),
        (8, 1, 1),
        (None, 2, 1),  # cores unknown (not Linux): half, as on two cores
        (None, 8, 4),
        (None, 1, 1),
    ],
)
def test_each_half_keeps_its_threads_only_where_both_have_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int | None, alone: int, beside: int
) -> None:
    monkeypatch.setattr(_workers, "usable_cores", lambda: cores)
    assert _workers.threads_beside(alone) == beside


def test_usable_cores_counts_a_cores_hyperthreads_once() -> None:
    cores = _workers.usable_cores()
    cpus = _workers.usable_cpus()
    if cores is None:  # no sysfs topology here: nothing to count
        pytest.skip("this system does not tell its physical cores")
    assert 1 <= cores <= cpus


def test_side_by_side_encodes_split_the_threads_one_encode_would_take(one_spare: SpareThreads, two_cores: None) -> None:
    emb = SentenceTransformerEmbedder("default", torch_threads=4)  # the model is not loaded for this
    single = SentenceTransformerEmbedder("default", torch_threads=1)
    assert emb.threads_for(3) == 4
    with spare_threads_allowed():
        halves = side_by_side(lambda: emb.threads_for(3), lambda: emb.threads_for(3))
        ones = side_by_side(lambda: single.threads_for(3), lambda: single.threads_for(3))
        long = side_by_side(lambda: emb.threads_for(500), lambda: 0)  # a long call (an index build): unchanged
    assert (halves, ones, long) == ((2, 2), (1, 1), (4, 0))


def test_side_by_side_encodes_of_the_librarys_choice_pick_among_the_counts_both_halves_fit(
    one_spare: SpareThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch_threads unset: a short encode beside another picks its count by measured speed, among those up to
    threads_beside(torch's count) (two cores: one; sixteen: 1, 2, 4 or 8), with a chooser of its own."""
    torch = pytest.importorskip("torch")
    emb = SentenceTransformerEmbedder("default")  # the model is not loaded for this
    for cores, wide, options in ((2, 2, (1,)), (16, 16, (1, 2, 4, 8)), (16, 8, (1, 2, 4, 8))):
        monkeypatch.setattr(_workers, "usable_cores", lambda cores=cores: cores)
        monkeypatch.setattr(torch, "get_num_threads", lambda wide=wide: wide)
        emb._beside = None
        with spare_threads_allowed():
            first = side_by_side(lambda: emb.threads_for(3), lambda: emb.threads_for(3))
        assert emb._beside is not None and emb._beside.options == options, cores
        assert set(first) <= set(options) and emb._threads is None  # the chooser alone is not asked
    assert emb.threads_for(3) in emb._chooser().options and emb._threads is not None  # alone: the other one
    # an encode's time goes to the chooser that picked its count
    emb._model = types.SimpleNamespace(device="cpu")
    monkeypatch.setattr(emb, "_encode", lambda texts, **kw: np.zeros((len(texts), 4), dtype=np.float32))
    emb._beside, emb._threads = None, None
    with spare_threads_allowed():
        for _ in range(3):  # the first call of each chooser is its warm-up
            side_by_side(lambda: emb.encode(["a message"]), lambda: emb.encode(["a request"]))
    assert emb._beside is not None and emb._beside._cost and emb._threads is None
    for _ in range(2):
        emb.encode(["alone"])
    assert emb._threads is not None and emb._threads._cost
    costs = emb.thread_costs()  # what a benchmark reads
    assert set(costs) == {"alone", "beside"} and costs["beside"] == emb._beside.costs()


def test_faiss_searches_one_vector_on_one_thread_and_restores_the_count(
    one_spare: SpareThreads, two_cores: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One query vector: one OpenMP thread (a team of every thread is no faster for it, and its threads spin on
    after the call on the core a spare thread needs); several: faiss's count, half of it beside another search;
    the calling thread's count is restored after each search."""
    faiss = pytest.importorskip("faiss")
    from toolrerank_plugins.retrieval.dense import _search_threads

    assert [_search_threads(n, 4, s) for n, s in ((1, False), (1, True), (3, False), (3, True))] == [1, 1, 4, 2]
    assert _search_threads(3, 1, True) == 1
    cfg = EngineConfig(retriever="dense", dense={"scan": "faiss"})  # "auto" multiplies in torch (test_matmul_scan)
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    dense = engine.first_stage
    vectors = FakeEmbedder().encode(["send an email", "weather forecast", "find a hotel"])
    before = faiss.omp_get_max_threads()
    seen: list[int] = []
    search = type(dense._index).search

    def recording(index: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(faiss.omp_get_max_threads())
        return search(index, *args, **kwargs)

    monkeypatch.setattr(type(dense._index), "search", recording)
    one = dense.search_vectors(vectors[:1], 3)
    many = dense.search_vectors(vectors, 3)
    assert seen == [1, before] and faiss.omp_get_max_threads() == before
    assert one == many[:1]


_PIECES = [
    "send an email to Bob",
    "tell me the weather forecast",
    "find a hotel in Rome",
    "delete the calendar event",
    "what's the exchange rate",
    "search for videos",
    "",
    "?",
    "    ",
]
_JOINS = [". Also, ", ". Additionally, ", " and then ", "\n", "; ", " and ", ". "]


@pytest.fixture(scope="module")
def engines_on_and_off() -> dict[bool, Engine]:
    catalog = tiny_catalog()
    return {p: Engine.build(catalog, _config("hybrid", p), embedder=FakeEmbedder()) for p in (True, False)}


@pytest.mark.fuzz
@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(_PIECES), st.sampled_from(_JOINS)), min_size=1, max_size=6), st.text(max_size=20)
)
def test_generated_messages_rank_the_same_with_and_without_the_spare_thread(
    engines_on_and_off: dict[bool, Engine], pieces: list[tuple[str, str]], noise: str
) -> None:
    message = "".join(p + j for p, j in pieces) + noise
    spare = SpareThreads(1)
    original = _workers._SPARE
    _workers._SPARE = spare  # one spare thread, whatever the machine (restored below)
    try:
        got = {
            p: [(h.id, round(h.score, 9)) for h in e.search(message, top_k=6)] for p, e in engines_on_and_off.items()
        }
    finally:
        _workers._SPARE = original
    assert got[True] == got[False]
