"""``add`` / ``update`` / ``remove`` are all-or-nothing, keep the index in catalog order, and never change what a
search already holds (issue 11, items 1, 2 and 8).

Faults are injected where real ones happen: the bi-encoder, the BM25 tokeniser, the index build (bm25s,
faiss) and a stage's ``on_index``. After a failed change the engine must be exactly as before (catalog,
every first-stage part, the stages' index state, search results); after a retry it must equal an engine
built from scratch on the expected catalog, and save and load.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError, ToolRerankError
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.retrieval.base import FirstStageType, register_first_stage
from toolrerank_plugins.retrieval.bm25 import BM25Retriever
from toolrerank_plugins.stages import Stage, StageContext, StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, WordSetIndex, tiny_catalog

QUERIES = [
    "send an email message",
    "weather forecast in a city",
    "order a pizza with extra cheese",
    "translate pizza orders",
    "log in with a password",
]

NEW = [
    ToolSpec("Food/Pizza/order", "order_pizza", "Order a pizza with extra cheese", tool="Pizza", category="Food"),
    ToolSpec("Food/Pizza/track", "track_order", "Track the delivery of a pizza order", tool="Pizza", category="Food"),
]
MID = "Weather/SkyCast/current"  # an API in the middle of tiny_catalog()
MID_V2 = ToolSpec(MID, "current", "Translate pizza orders into Italian", tool="SkyCast", category="Weather")


class InjectedFault(RuntimeError):
    """What the injected faults raise (a dependency failing: out of memory, a model error, ...)."""


class Fault:
    """A switch shared by the fault points: armed with a point's name, that point's next call raises."""

    def __init__(self) -> None:
        self.armed: str | None = None
        self.fired = 0

    def check(self, where: str) -> None:
        if self.armed == where:
            self.armed = None
            self.fired += 1
            raise InjectedFault(f"injected failure in {where}")


class FlakyEmbedder(FakeEmbedder):
    def __init__(self, fault: Fault) -> None:
        super().__init__()
        self.fault = fault

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        self.fault.check("encoder")
        return super().encode(texts, **kwargs)


class FailingOnIndex(Stage):
    """A stage whose ``on_index`` fails when the fault is armed (it runs after the other stages')."""

    name = "failing_on_index"

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def run(self, query, candidates, ctx, trace):  # type: ignore[no-untyped-def]
        return candidates

    def on_index(self, ctx: StageContext) -> None:
        self.fault.check("on_index")


@contextmanager
def tokenizer_fault(fault: Fault) -> Iterator[None]:
    original = BM25Retriever._tokenize

    def tokenize(self: BM25Retriever, texts: Sequence[str]) -> list[list[str]]:
        fault.check("tokenizer")
        return original(self, texts)

    with mock.patch.object(BM25Retriever, "_tokenize", tokenize):
        yield


@contextmanager
def index_build_fault(fault: Fault) -> Iterator[None]:
    """bm25s model indexing and faiss index creation fail when armed."""
    import bm25s
    import faiss

    bm25_index, flat = bm25s.BM25.index, faiss.IndexFlatIP

    def index(self: Any, *args: Any, **kwargs: Any) -> Any:
        fault.check("bm25s index")
        return bm25_index(self, *args, **kwargs)

    def make_flat(*args: Any) -> Any:
        fault.check("faiss index")
        return flat(*args)

    with mock.patch.object(bm25s.BM25, "index", index), mock.patch.object(faiss, "IndexFlatIP", make_flat):
        yield


# -- engines ---------------------------------------------------------------------------------------------
KINDS = ["bm25", "dense", "hybrid", "dense+tgr", "bm25+toolrerank"]


def _config(kind: str) -> EngineConfig:
    retriever, _, stage = kind.partition("+")
    stages = [StageSpec(type=stage)] if stage else []
    return EngineConfig(retriever=retriever, stages=stages)  # type: ignore[arg-type]


def _engine(kind: str, catalog: Catalog, fault: Fault, *, failing_stage: bool = True) -> Engine:
    engine = Engine.build(catalog, _config(kind), embedder=FlakyEmbedder(fault))
    if failing_stage:
        engine.set_stages([*engine.stages, FailingOnIndex(fault)])
    return engine


def _fresh_results(kind: str, catalog: Catalog) -> dict[str, list[tuple[str, int]]]:
    if len(catalog) == 0:
        return {q: [] for q in QUERIES}
    fresh = Engine.build(catalog.copy(), _config(kind), embedder=FakeEmbedder())
    return _results(fresh)


def _results(engine: Engine) -> dict[str, list[tuple[str, int]]]:
    return {q: [(r.id, r.rank) for r in engine.search(q, 20)] for q in QUERIES}


def _scores(engine: Engine) -> dict[str, list[float]]:
    return {q: [round(r.score, 5) for r in engine.search(q, 20)] for q in QUERIES}


def _stage_state(stage: Stage) -> Any:
    from toolrerank_plugins.graph.stage import TGRStage
    from toolrerank_plugins.rerank.stage import ToolRerankStage

    if isinstance(stage, TGRStage):
        g = stage.graph
        assert g is not None
        return (
            "tgr",
            g.fingerprint,
            sorted(g.node_hashes().items()),
            sorted((e.source, e.target, e.origin, e.weight) for e in g.edges()),
        )
    if isinstance(stage, ToolRerankStage):
        return ("toolrerank", {k: list(v) for k, v in stage._tool_index.items()})
    return (stage.name,)


def _state(engine: Engine) -> dict[str, Any]:
    """Everything a failed change must leave as it was."""
    cat = engine.catalog
    parts: dict[str, Any] = {}
    for name, part in engine.first_stage.parts.items():
        parts[name] = part.ids
        if part.has_embeddings:
            emb = part.embeddings_for(part.ids)
            parts[name + ":emb"] = hashlib.sha256(np.ascontiguousarray(emb).tobytes()).hexdigest() if len(cat) else ""
    return {
        "catalog": (list(cat), cat.edges, sorted(cat.seen_tools)),
        "parts": parts,
        "stages": [_stage_state(s) for s in engine.stages],
        "results": _results(engine),
        "scores": _scores(engine),
        "objects": (id(engine.catalog), id(engine.first_stage), [id(s) for s in engine.stages]),
    }


def _assert_in_catalog_order(engine: Engine) -> None:
    for name, part in engine.first_stage.parts.items():
        assert part.ids == engine.catalog.ids, f"{name} ids are not in catalog order"


# -- item 1: update keeps positions; the saved engine loads -----------------------------------------------
@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid", "dense+tgr"])
def test_update_keeps_positions_and_the_saved_engine_loads(kind: str, tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), _config(kind), embedder=FakeEmbedder())
    order = engine.catalog.ids
    engine.update([MID_V2])
    assert engine.catalog.ids == order
    _assert_in_catalog_order(engine)
    assert engine.search("translate pizza orders into italian", 1)[0].id == MID
    back = Engine.load(engine.save(tmp_path / "eng"), embedder=FakeEmbedder())
    _assert_in_catalog_order(back)
    assert _results(back) == _results(engine)
    assert _results(engine) == _fresh_results(kind, engine.catalog)


# -- item 2: all-or-nothing ------------------------------------------------------------------------------
MUTATIONS: dict[str, Callable[[Engine], None]] = {
    "add": lambda e: e.add(NEW),
    "update": lambda e: e.update([MID_V2]),
    "remove": lambda e: e.remove([MID, "Auth/Keyring/login"]),
}


def _expected(mutation: str) -> Catalog:
    cat = tiny_catalog()
    if mutation == "add":
        cat.add(NEW)
    elif mutation == "update":
        cat.update([MID_V2])
    else:
        cat.remove([MID, "Auth/Keyring/login"])
    return cat


def _cases() -> Iterator[Any]:
    for kind in KINDS:
        dense, lexical = kind.startswith(("dense", "hybrid")), kind.startswith(("bm25", "hybrid"))
        # hybrid: the BM25 part fails after the dense part has changed
        points = ["on_index", "bm25s index" if lexical else "faiss index"]
        for mutation in MUTATIONS:
            if mutation != "remove":  # remove encodes and tokenises nothing
                points_here = [*points, *(["encoder"] if dense else []), *(["tokenizer"] if lexical else [])]
            else:
                points_here = points
            for where in points_here:
                yield pytest.param(kind, mutation, where, id=f"{kind}-{mutation}-{where.replace(' ', '_')}")


@pytest.mark.parametrize(("kind", "mutation", "where"), list(_cases()))
def test_a_failing_change_leaves_the_engine_exactly_as_before(
    kind: str, mutation: str, where: str, tmp_path: Path
) -> None:
    fault = Fault()
    engine = _engine(kind, tiny_catalog(), fault)
    before = _state(engine)
    with tokenizer_fault(fault), index_build_fault(fault):
        fault.armed = where
        with pytest.raises(InjectedFault, match=where):
            MUTATIONS[mutation](engine)
        assert fault.fired == 1
    assert _state(engine) == before
    # the failed change left nothing behind: the same change now succeeds (no "duplicate API id")
    MUTATIONS[mutation](engine)
    _assert_in_catalog_order(engine)
    expected = _expected(mutation)
    assert engine.catalog.ids == expected.ids and list(engine.catalog) == list(expected)
    assert _results(engine) == _fresh_results(kind, expected)
    back = Engine.load(engine.save(tmp_path / "eng"), embedder=FakeEmbedder())
    assert _results(back) == _results(engine)


@pytest.mark.parametrize("kind", KINDS)
def test_invalid_changes_raise_catalog_errors_and_change_nothing(kind: str) -> None:
    engine = _engine(kind, tiny_catalog(), Fault(), failing_stage=False)
    before = _state(engine)
    first = tiny_catalog()["Auth/Keyring/login"]
    bad: list[tuple[Callable[[], None], type[Exception], str]] = [
        (lambda: engine.add([NEW[0], NEW[0]]), CatalogError, "duplicate API id"),
        (lambda: engine.add([NEW[0], first]), CatalogError, "duplicate API id"),
        (lambda: engine.add([NEW[0], object()]), CatalogError, "expected a ToolSpec"),  # type: ignore[list-item]
        (lambda: engine.add([NEW[0], ToolSpec("x", "")]), CatalogError, "name"),
        (lambda: engine.add(NEW[0]), TypeError, "not a single ToolSpec"),  # type: ignore[arg-type]
        (lambda: engine.update([MID_V2, ToolSpec("no/such/api", "x")]), CatalogError, "unknown API id"),
        (lambda: engine.update([MID_V2, MID_V2]), CatalogError, "given twice"),
        (lambda: engine.remove([MID, "no/such/api"]), CatalogError, "unknown API id"),
        (lambda: engine.remove([MID, MID]), CatalogError, "given twice"),
        (lambda: engine.remove([MID, 3]), CatalogError, "unknown API id"),  # type: ignore[list-item]
        (lambda: engine.remove(MID), TypeError, "not a single str"),
        (lambda: engine.remove(5), TypeError, "iterable of API ids"),  # type: ignore[arg-type]
    ]
    for call, error, message in bad:
        with pytest.raises(error, match=message):
            call()
        assert _state(engine) == before
    engine.add([])
    engine.update([])
    engine.remove([])
    assert _state(engine) == before


def test_the_previous_snapshot_is_never_changed() -> None:
    """Copy-on-write: what a running search holds (first stage, stages, catalog) keeps answering as before."""
    engine = Engine.build(tiny_catalog(), _config("dense+tgr"), embedder=FakeEmbedder())
    old_catalog, old_first, old_stage = engine.catalog, engine.first_stage, engine.stages[0]
    old_graph = _stage_state(old_stage)
    old_hits = old_first.search(QUERIES, 20)
    engine.add(NEW)
    engine.update([MID_V2])
    engine.remove(["Auth/Keyring/login"])
    assert engine.first_stage is not old_first and engine.stages[0] is not old_stage
    assert old_first.search(QUERIES, 20) == old_hits
    assert old_catalog.ids == tiny_catalog().ids and list(old_catalog) == list(tiny_catalog())
    assert _stage_state(old_stage) == old_graph
    assert _stage_state(engine.stages[0]) != old_graph


@pytest.mark.parametrize("kind", ["dense", "hybrid", "dense+tgr"])
def test_changes_encode_only_new_or_changed_texts(kind: str) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config(kind), embedder=emb)
    n = emb.texts_encoded
    engine.add(NEW)
    assert emb.texts_encoded - n == len(NEW)
    n = emb.texts_encoded
    engine.update([MID_V2])
    assert emb.texts_encoded - n == 1
    n = emb.texts_encoded
    engine.remove([MID])
    assert emb.texts_encoded == n


def test_bm25_update_tokenises_only_the_changed_texts() -> None:
    engine = Engine.build(tiny_catalog(), _config("bm25"))
    seen: list[int] = []
    original = BM25Retriever._tokenize

    def counting(self: BM25Retriever, texts: Sequence[str]) -> list[list[str]]:
        seen.append(len(texts))
        return original(self, texts)

    with mock.patch.object(BM25Retriever, "_tokenize", counting):
        engine.update([MID_V2])
        engine.remove(["Auth/Keyring/login"])
    assert seen == [1]


# -- item 8: removing every API ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_removing_every_api_saves_loads_and_fills_again(kind: str, tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), _config(kind), embedder=FakeEmbedder())
    engine.remove(engine.catalog.ids)
    assert len(engine.catalog) == 0 and engine.search("send an email", 5) == []
    _assert_in_catalog_order(engine)
    back = Engine.load(engine.save(tmp_path / "eng"), embedder=FakeEmbedder())
    assert len(back.catalog) == 0 and back.search("send an email", 5) == []
    back.add(list(tiny_catalog()))
    assert _results(back) == _fresh_results(kind, tiny_catalog())


# -- generated sequences of changes -----------------------------------------------------------------------
POOL = [
    ToolSpec(f"Gen/Kit/api_{i}", f"api_{i}", text, tool="Kit", category="Gen")
    for i, text in enumerate(
        [
            "Order a pizza with extra cheese",
            "Book a table at a restaurant",
            "Translate a sentence into French",
            "Convert a currency amount",
            "Send an email to the whole team",
            "Weather radar for a city",
        ]
    )
]
EDITS = ["Order sushi for delivery", "Log in with a fingerprint", "Forecast of email traffic", ""]
BASE_IDS = tiny_catalog().ids

ids_ = st.sampled_from([*BASE_IDS, *(s.id for s in POOL), "no/such/api"])
op_ = st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(POOL + [tiny_catalog()[BASE_IDS[0]]]), max_size=3)),
    st.tuples(st.just("update"), st.lists(st.tuples(ids_, st.sampled_from(EDITS)), max_size=3)),
    st.tuples(st.just("remove"), st.lists(ids_, max_size=4)),
)
step_ = st.tuples(op_, st.booleans())  # (change, inject a fault in the encoder / tokeniser)


def _apply(catalog: Catalog, op: tuple[str, list[Any]]) -> list[Any]:
    """Apply ``op`` to ``catalog``; returns the argument to pass to the engine's method."""
    name, args = op
    if name == "add":
        catalog.add(args)
        return args
    if name == "update":
        specs = [
            ToolSpec(i, i.rsplit("/", 1)[-1], text, tool="Kit")
            if i not in catalog
            else ToolSpec(i, catalog[i].name, text, tool=catalog[i].tool, category=catalog[i].category)
            for i, text in args
        ]
        catalog.update(specs)
        return specs
    catalog.remove(args)
    return args


@pytest.mark.fuzz
@pytest.mark.parametrize("kind", ["bm25", "dense"])
@FUZZ
@given(steps=st.lists(step_, min_size=1, max_size=6))
def test_random_changes_match_an_engine_built_from_scratch(kind: str, steps: list[Any]) -> None:
    fault = Fault()
    engine = _engine(kind, tiny_catalog(), fault, failing_stage=False)
    model = tiny_catalog()
    with tokenizer_fault(fault):
        for op, inject in steps:
            before = _state(engine)
            attempt = model.copy()
            try:
                arg = _apply(attempt, op)
                model_error: Exception | None = None
            except CatalogError as exc:
                arg, model_error = op[1], exc
                if op[0] == "update":  # same specs as the valid path would build
                    arg = [ToolSpec(i, i.rsplit("/", 1)[-1], t, tool="Kit") for i, t in op[1]]
            changes_index = model_error is None and op[0] in ("add", "update") and len(arg) > 0
            fault.armed = ("encoder" if kind == "dense" else "tokenizer") if inject else None
            error: Exception | None = None
            try:
                getattr(engine, op[0])(arg)
            except (ToolRerankError, InjectedFault) as exc:
                error = exc
            finally:
                fault.armed = None
            if error is not None:
                assert model_error is not None or (inject and changes_index), f"{op}: unexpected {error!r}"
                assert _state(engine) == before, f"{op} failed ({error!r}) but changed the engine"
                continue
            assert model_error is None, f"{op}: the engine accepted what the catalog refuses ({model_error})"
            assert not (inject and changes_index), f"{op}: the fault was never hit"
            model = attempt
            _assert_in_catalog_order(engine)
            assert list(engine.catalog) == list(model)
            assert _results(engine) == _fresh_results(kind, model)


def test_the_flaky_embedder_is_the_engines_encoder() -> None:
    """Guard for the fault points above: a FlakyEmbedder really is the encoder of the engine's index."""
    fault = Fault()
    engine = _engine("dense", tiny_catalog(), fault, failing_stage=False)
    fault.armed = "encoder"
    with pytest.raises(InjectedFault):
        engine.search("anything", 1)


class _NoParams(BaseModel):
    pass


def test_a_stage_type_with_a_failing_on_index_in_the_config_leaves_the_engine_unchanged() -> None:
    fault = Fault()
    register_stage_type(
        "test_failing_on_index", StageType(_NoParams, lambda cfg, ctx, path: FailingOnIndex(fault)), replace=True
    )
    cfg = EngineConfig(retriever="dense", stages=[StageSpec(type="tgr"), StageSpec(type="test_failing_on_index")])
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    before = _state(engine)
    fault.armed = "on_index"
    with pytest.raises(InjectedFault):
        engine.add(NEW)
    assert _state(engine) == before
    fault.armed = "on_index"
    with pytest.raises(InjectedFault):
        engine.set_stages([FailingOnIndex(fault)])
    assert _state(engine) == before


# -- a third-party backend that only implements the abstract methods (testing.WordSetIndex) -------------------
def test_a_backend_with_the_default_update_and_copy_stays_in_catalog_order(caplog: pytest.LogCaptureFixture) -> None:
    register_first_stage(
        "test_words",
        FirstStageType(build=lambda cfg, emb: WordSetIndex(), load=lambda root, cfg, emb: WordSetIndex.load(root, cfg)),
        replace=True,
    )
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="test_words"))
    old = engine.first_stage
    engine.update([MID_V2])
    assert "re-indexing it" in caplog.text  # remove + add moved the id to the end; the engine re-indexed
    _assert_in_catalog_order(engine)
    assert engine.search("translate pizza orders", 1)[0].id == MID
    assert old.ids == tiny_catalog().ids and old.search(["translate pizza orders"], 1) == [[]]  # copy-on-write
    engine.add(NEW)
    engine.remove([MID])
    _assert_in_catalog_order(engine)
    assert engine.search("order a pizza with extra cheese", 1)[0].id == NEW[0].id
