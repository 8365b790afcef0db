"""Bad specs, catalogs and search arguments get the library's clear errors (issue 11, items 6 and 7).

Generated inputs (hypothesis, budget in ``tests/_fuzz.py``) for ``ToolSpec(...)``, ``Catalog(...)``,
``Engine.build`` and every search entry point: the only exceptions allowed out are the library's own
(:class:`ToolRerankError` subclasses) and, for a wrong argument of a call, a ``TypeError``/``ValueError``
raised by the library that names the argument. A spec that is accepted must build, search, save and load.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests._fuzz import FUZZ
from toolrerank_plugins import Catalog, CatalogError, Engine, EngineConfig, ToolSpec
from toolrerank_plugins.errors import ConfigError, ToolRerankError
from toolrerank_plugins.records import Edge
from toolrerank_plugins.stages import Stage, StageSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

# -- generated JSON-like values, hostile ones included ----------------------------------------------
SURROGATES = st.sampled_from(["\ud800", "x\udfffy", "\udc80", "ok \ud83d"])
TEXTS = st.one_of(st.text(max_size=12), SURROGATES)
# Built by .map(): hypothesis cannot repr an int past Python's 4,300-digit str limit in a strategy.
HUGE_INTS = st.sampled_from([64, 1024, 1330, 16610]).map(lambda bits: 2**bits) | st.just(-(2**63))
NOT_JSON = st.one_of(
    st.binary(max_size=3),
    st.sets(st.integers(0, 3), max_size=2),
    st.frozensets(st.integers(0, 3), max_size=2),
    st.just(1j),
    st.builds(object),
    st.just(np.int64(3)),
    st.just(range(2)),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(), TEXTS, NOT_JSON)
KEYS = st.one_of(TEXTS, st.integers(-2, 2), st.tuples(st.integers(0, 1), st.integers(0, 1)), st.none())


def _nest(value: Any, depth: int, kind: str) -> Any:
    for _ in range(depth):
        value = [value] if kind == "list" else {"properties": {"x": value}}
    return value


def _cyclic(kind: str) -> Any:
    if kind == "list":
        out: list[Any] = [1]
        out.append(out)
        return out
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["self"] = node
    return node


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3), st.tuples(children, children), st.dictionaries(KEYS, children, max_size=3)
    )


def _json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3))


JSON_LIKE = st.recursive(SCALARS, _containers, max_leaves=10)
HOSTILE = st.one_of(
    JSON_LIKE,
    st.builds(_nest, JSON_LIKE, st.integers(0, 300), st.sampled_from(["list", "dict"])),
    st.builds(_cyclic, st.sampled_from(["list", "dict"])),
)


def mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """~90 % ``valid``: a whole spec is then often accepted, so build/search/save/load run too."""
    # (st.one_of(valid, valid, ...) would not weight: hypothesis merges identical branches.)
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda ok: valid if ok else hostile)


#: JSON that must be accepted and survive save/load unchanged.
JSON_OK = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    _json_containers,
    max_leaves=10,
)
PROPERTY = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "ENUM", "array"])},
    optional={
        "description": mostly(st.text(max_size=20), TEXTS),
        "items": mostly(JSON_OK, HOSTILE),
        "enum": mostly(st.lists(JSON_OK, max_size=3), st.lists(SCALARS, max_size=3)),
    },
)
SCHEMAS = mostly(
    st.fixed_dictionaries(
        {
            "type": st.just("object"),
            "properties": st.dictionaries(st.text(min_size=1, max_size=6), PROPERTY, max_size=3),
        },
        optional={"required": st.lists(st.text(max_size=4), max_size=2)},
    ),
    HOSTILE,
)


NAMES = mostly(st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True), st.one_of(TEXTS, SCALARS, HOSTILE))
OPTIONAL_TEXT = mostly(
    st.one_of(st.none(), st.from_regex(r"[A-Za-z ]{0,20}", fullmatch=True)), st.one_of(TEXTS, SCALARS)
)
SPEC_KWARGS = st.fixed_dictionaries(
    {"id": NAMES, "name": NAMES},
    optional={
        "description": mostly(st.text(max_size=40), st.one_of(TEXTS, SCALARS, HOSTILE)),
        "tool": OPTIONAL_TEXT,
        "tool_description": OPTIONAL_TEXT,
        "category": OPTIONAL_TEXT,
        "parameters": st.one_of(st.none(), SCHEMAS),
        "returns": st.one_of(st.none(), SCHEMAS),
        "metadata": mostly(st.dictionaries(st.text(max_size=5), JSON_OK, max_size=3), st.one_of(st.none(), HOSTILE)),
    },
)

BASE = [
    ToolSpec(id="base/weather", name="forecast", description="weather forecast for a city", tool="SkyCast"),
    ToolSpec(id="base/mail", name="send_email", description="send an email message", tool="PostBox"),
]


# -- helpers ----------------------------------------------------------------------------------------
def _build_search_save_load(catalog: Catalog, retriever: str, queries: Iterable[str] = ()) -> None:
    """An accepted catalog must build, search, save and load, and the loaded engine must answer the same."""
    config = EngineConfig(retriever=retriever)  # type: ignore[arg-type]
    engine = Engine.build(catalog, config, embedder=FakeEmbedder(32))
    qs = ["weather forecast", "send email", *queries, *(s.name for s in catalog)][:8]
    before = [[(r.id, round(r.score, 5)) for r in rs] for rs in engine.search_batch(qs, 3)]
    with tempfile.TemporaryDirectory() as tmp:
        engine.save(Path(tmp) / "engine")
        loaded = Engine.load(Path(tmp) / "engine", embedder=FakeEmbedder(32))
    assert [s.to_dict() for s in loaded.catalog] == [s.to_dict() for s in catalog]
    after = [[(r.id, round(r.score, 5)) for r in rs] for rs in loaded.search_batch(qs, 3)]
    assert after == before


def _raised_by_library(exc: BaseException) -> bool:
    """The innermost frame of the traceback is in toolrerank_plugins (not numpy, faiss or bm25s)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "toolrerank_plugins" in frames[-1].filename


def _argument_error(call: Callable[[], Any], names: Iterable[str]) -> BaseException | None:
    """Run ``call``; a TypeError/ValueError must come from the library and name one of ``names``."""
    try:
        call()
    except (TypeError, ValueError) as exc:
        assert _raised_by_library(exc), f"not raised by the library: {exc!r}\n{traceback.format_exc()}"
        assert any(n in str(exc) for n in names), f"{exc!r} names none of {list(names)}"
        return exc
    return None


# -- ToolSpec and Catalog --------------------------------------------------------------------------
@FUZZ
@pytest.mark.fuzz
@given(kwargs=SPEC_KWARGS, retriever=st.sampled_from(["bm25", "dense"]))
def test_generated_toolspecs_are_rejected_clearly_or_work_end_to_end(kwargs: dict, retriever: str) -> None:
    try:
        spec = ToolSpec(**kwargs)
        catalog = Catalog([spec, *BASE])
    except ToolRerankError:
        event("rejected")
        return
    event("accepted")
    _build_search_save_load(catalog, retriever, [spec.description])


@FUZZ
@pytest.mark.fuzz
@given(
    tools=st.one_of(st.lists(st.one_of(st.sampled_from(BASE), HOSTILE), max_size=3), HOSTILE),
    edges=st.one_of(
        st.lists(st.builds(Edge, st.one_of(st.just("base/mail"), TEXTS, SCALARS), st.just("base/weather")), max_size=2),
        HOSTILE,
    ),
    seen=st.one_of(st.lists(st.one_of(TEXTS, SCALARS), max_size=3), TEXTS, HOSTILE),
    source=st.one_of(st.just("<memory>"), TEXTS, SCALARS),
)
def test_generated_catalog_arguments_are_rejected_clearly(tools: Any, edges: Any, seen: Any, source: Any) -> None:
    try:
        catalog = Catalog(tools, edges=edges, seen_tools=seen, source=source)
    except ToolRerankError:
        return
    except (TypeError, ValueError) as exc:
        assert _raised_by_library(exc), traceback.format_exc()
        assert any(n in str(exc) for n in ("tools", "edges", "seen_tools", "source")), exc
        return
    assert all(isinstance(t, str) for t in catalog.seen_tools)
    if len(catalog):
        catalog.tools(), catalog.categories()
        _build_search_save_load(catalog, "bm25")


# -- explicit regressions (the examples of issue 11, item 6) ----------------------------------------
def _deep_schema(levels: int) -> dict:
    """A parameters schema whose JSON nesting is ``levels`` containers deep (the top mapping is level 1)."""
    inner: Any = "leaf"
    for _ in range(levels - 1):
        inner = [inner]
    return {"type": "object", "properties": {}, "x-deep": inner}


def test_cyclic_schemas_are_rejected_at_creation() -> None:
    with pytest.raises(CatalogError, match=r"API 'a': 'parameters'.*(cycle|cyclic)"):
        ToolSpec(id="a", name="a", parameters=_cyclic("dict"))
    with pytest.raises(CatalogError, match=r"API 'a': 'metadata'.*(cycle|cyclic)"):
        ToolSpec(id="a", name="a", metadata={"x": _cyclic("list")})


def test_nesting_limit_is_64_levels() -> None:
    from toolrerank_plugins.records import MAX_NESTING

    assert MAX_NESTING == 64
    ok = ToolSpec(id="a", name="a", parameters=_deep_schema(MAX_NESTING))
    assert ok.to_dict()["parameters"] == _deep_schema(MAX_NESTING)
    with pytest.raises(CatalogError, match=r"API 'a': 'parameters'.*nested more than 64 levels"):
        ToolSpec(id="a", name="a", parameters=_deep_schema(MAX_NESTING + 1))
    with pytest.raises(CatalogError, match="nested more than 64 levels"):
        ToolSpec(id="a", name="a", parameters=_nest({"type": "object"}, 300, "dict"))


@pytest.mark.parametrize("field", ["id", "name", "description", "tool", "tool_description", "category"])
def test_lone_surrogates_in_text_fields_are_rejected(field: str) -> None:
    kwargs: dict[str, Any] = {"id": "a", "name": "a", field: "bad \ud800 text"}
    with pytest.raises(CatalogError, match=rf"'{field}'.*surrogate"):
        ToolSpec(**kwargs)


def test_lone_surrogates_inside_json_fields_are_rejected() -> None:
    with pytest.raises(CatalogError, match=r"'parameters'.*surrogate"):
        ToolSpec(id="a", name="a", parameters={"type": "object", "properties": {"x": {"description": "\udfff"}}})
    with pytest.raises(CatalogError, match=r"'metadata'.*surrogate"):
        ToolSpec(id="a", name="a", metadata={"\ud800": 1})


@pytest.mark.parametrize("field", ["id", "name", "description", "tool", "tool_description", "category"])
@pytest.mark.parametrize("value", [["x"], {"x": 1}, 5, b"x"])
def test_non_string_text_fields_are_rejected(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"id": "a", "name": "a", field: value}
    with pytest.raises(CatalogError, match=rf"'{field}' must be a string"):
        ToolSpec(**kwargs)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"x", "bytes"),
        ({1, 2}, "set"),
        ({(1, 2): 1}, "key"),
        ({1: "a"}, "key"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        (1j, "complex"),
        (np.int64(1), "int64"),
        (2**2000, "integer"),
    ],
)
def test_values_that_cannot_be_saved_as_json_are_rejected_at_creation(value: Any, problem: str) -> None:
    with pytest.raises(CatalogError, match=rf"(?i)API 'a': 'metadata'.*{problem}"):
        ToolSpec(id="a", name="a", metadata={"x": value} if problem != "key" else value)


def test_non_mapping_json_fields_are_rejected() -> None:
    with pytest.raises(CatalogError, match="'parameters' must be a JSON Schema object, got list"):
        ToolSpec(id="a", name="a", parameters=["x"])  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="'returns' must be a JSON Schema mapping or null"):
        ToolSpec(id="a", name="a", returns="x")  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="'metadata' must be a mapping"):
        ToolSpec(id="a", name="a", metadata=[1])  # type: ignore[arg-type]


def test_metadata_none_is_normalised_to_an_empty_mapping(tmp_path: Path) -> None:
    spec = ToolSpec(id="a", name="alpha", metadata=None)  # type: ignore[arg-type]
    assert dict(spec.metadata) == {} and spec.to_dict()["extra"] == {}
    assert spec == ToolSpec(id="a", name="alpha")
    engine = Engine.build(Catalog([spec]), EngineConfig(retriever="bm25"))
    engine.save(tmp_path / "e")
    assert Engine.load(tmp_path / "e").catalog["a"] == spec


def test_valid_json_values_are_kept_exactly() -> None:
    meta = {"n": 2**1023, "f": -0.5, "t": (1, "two", None, True), "u": "天気 🌦", "e": {}}
    spec = ToolSpec(id="a", name="a", metadata=meta)
    assert spec.to_dict()["extra"] == {"n": 2**1023, "f": -0.5, "t": [1, "two", None, True], "u": "天気 🌦", "e": {}}


def test_unhashable_tool_and_category_fail_at_creation_not_later() -> None:
    with pytest.raises(CatalogError, match="'tool' must be a string"):
        Catalog([ToolSpec(id="a", name="a", tool=["x"])])  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="'category' must be a string"):
        Catalog([ToolSpec(id="a", name="a", category={"x": 1})])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"tools": 5}, "tools"),
        ({"tools": None}, "tools"),
        ({"tools": ["not a spec"]}, "expected a ToolSpec"),
        ({"tools": BASE, "edges": [("base/mail", "base/weather")]}, "edge"),
        ({"tools": BASE, "edges": [Edge(["x"], "base/mail")]}, "edge"),  # type: ignore[arg-type]
        ({"tools": BASE, "edges": 5}, "edges"),
        ({"tools": BASE, "seen_tools": "SkyCast"}, "seen_tools"),
        ({"tools": BASE, "seen_tools": [["x"]]}, "seen_tools"),
        ({"tools": BASE, "seen_tools": 5}, "seen_tools"),
        ({"tools": BASE, "source": 5}, "source"),
    ],
)
def test_catalog_constructor_checks_its_arguments(kwargs: dict, argument: str) -> None:
    with pytest.raises((CatalogError, TypeError), match=argument) as info:
        Catalog(**kwargs)
    assert _raised_by_library(info.value)


# -- search arguments (item 7) ---------------------------------------------------------------------
@pytest.fixture(scope="module", params=["bm25", "dense"])
def engine(request: pytest.FixtureRequest) -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever=request.param), embedder=FakeEmbedder(32))


BAD_TOP_K = [None, "3", 2.5, math.nan, True, False, 3.0, [3], np.float64(2.0)]


@pytest.mark.parametrize("top_k", BAD_TOP_K)
def test_bad_top_k_is_a_clear_type_error(engine: Engine, top_k: Any) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: engine.search("email", top_k),
        lambda: engine.search_detailed("email", top_k),
        lambda: engine.search_batch(["email"], top_k),
        lambda: engine.search_batch_detailed(["email"], top_k),
        lambda: asyncio.run(engine.asearch("email", top_k)),
        lambda: asyncio.run(engine.asearch_batch(["email"], top_k)),
        lambda: asyncio.run(engine.asearch_detailed("email", top_k)),
    ]
    if top_k is not None:
        specs = list(engine.catalog)[:3]
        calls += [
            lambda: engine.rerank("email", specs, top_k),
            lambda: asyncio.run(engine.arerank("email", specs, top_k)),
        ]
    for call in calls:
        with pytest.raises(TypeError, match="top_k must be an int") as info:
            call()
        assert _raised_by_library(info.value)


@pytest.mark.parametrize("top_k", [0, -1, np.int64(0)])
def test_top_k_below_one_is_a_value_error(engine: Engine, top_k: Any) -> None:
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        engine.search("email", top_k)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        engine.rerank("email", list(engine.catalog)[:2], top_k)


def test_numpy_integer_top_k_is_an_int(engine: Engine) -> None:
    assert [r.id for r in engine.search("email", np.int64(2))] == [r.id for r in engine.search("email", 2)]


def test_retrieve_checks_its_arguments_as_search_does(engine: Engine) -> None:
    # fuzz reproducers: np.int64 top_k reached faiss (TypeError), 0 an assertion in faiss, and a bare string on
    # BM25 gave one ranking per character
    assert [r.id for r in engine.retrieve(["email"], np.int64(2))[0]] == [
        r.id for r in engine.retrieve(["email"], 2)[0]
    ]
    for top_k in (0, -1, np.int64(0)):
        with pytest.raises(ValueError, match="top_k must be >= 1") as info:
            engine.retrieve(["email"], top_k)
        assert _raised_by_library(info.value)
    with pytest.raises(TypeError, match="queries must be .*not a single string"):
        engine.retrieve("email", 3)
    with pytest.raises(ValueError, match="lone surrogate"):
        engine.retrieve(["mail \udfff"], 3)
    assert engine.retrieve([], 3) == []


def test_a_string_is_not_a_batch(engine: Engine) -> None:
    for call in (
        lambda: engine.search_batch("email"),
        lambda: engine.search_batch_detailed("email"),
        lambda: asyncio.run(engine.asearch_batch("email")),
        lambda: asyncio.run(engine.asearch_batch_detailed("email")),
    ):
        with pytest.raises(TypeError, match="queries must be .*not a single string"):
            call()


@pytest.mark.parametrize("query", ["", " ", "\t\n  "])
def test_blank_queries_rank_nothing(engine: Engine, query: str) -> None:
    assert engine.search(query) == []
    assert asyncio.run(engine.asearch(query)) == []
    detailed = engine.search_detailed(query)
    assert detailed.query == query and detailed.results == []
    batch = engine.search_batch(["weather forecast", query, "send an email"], 3)
    assert batch[1] == [] and [r.id for r in batch[0]] == [r.id for r in engine.search("weather forecast", 3)]
    assert [r.id for r in batch[2]] == [r.id for r in engine.search("send an email", 3)]
    specs = list(engine.catalog)[:3]
    assert [r.id for r in engine.rerank(query, specs)] == [s.id for s in specs]


def test_long_queries_are_cut_to_the_documented_length(engine: Engine) -> None:
    from toolrerank_plugins._validate import MAX_QUERY_CHARS

    long_query = "send an email to my boss " * 5000  # 125,000 characters
    assert len(long_query) > MAX_QUERY_CHARS
    res = engine.search_detailed(long_query, 3)
    assert res.query == long_query[:MAX_QUERY_CHARS]
    assert [r.id for r in res.results] == [r.id for r in engine.search(long_query[:MAX_QUERY_CHARS], 3)]
    assert len(res.results) == 3


@pytest.mark.parametrize("query", ["\ud800", "mail \udfff me"])
def test_lone_surrogates_in_queries_are_a_value_error(engine: Engine, query: str) -> None:
    with pytest.raises(ValueError, match="query .*surrogate"):
        engine.search(query)
    with pytest.raises(ValueError, match=r"queries\[1\] .*surrogate"):
        engine.search_batch(["ok", query])
    with pytest.raises(ValueError, match="query .*surrogate"):
        engine.rerank(query, list(engine.catalog)[:2])


@pytest.mark.parametrize("query", [None, 5, ["email"], b"email"])
def test_non_string_query_names_the_argument(engine: Engine, query: Any) -> None:
    for call in (
        lambda: engine.search(query),
        lambda: asyncio.run(engine.asearch(query)),
        lambda: engine.rerank(query, list(engine.catalog)[:2]),
    ):
        with pytest.raises(TypeError, match="query must be a string") as info:
            call()
        assert _raised_by_library(info.value)


@pytest.mark.parametrize("exclude", [5, "Auth/Keyring/login", [["x"]], [None], {"a": 1}])
def test_bad_exclude_is_a_type_error(engine: Engine, exclude: Any) -> None:
    with pytest.raises(TypeError, match="exclude") as info:
        engine.search("email", 3, exclude=exclude)
    assert _raised_by_library(info.value)
    with pytest.raises(TypeError, match="exclude"):
        asyncio.run(engine.asearch_batch(["email"], 3, exclude=exclude))


def test_exclude_may_be_a_generator(engine: Engine) -> None:
    first = engine.search("send an email", 3)[0].id
    assert first not in [r.id for r in engine.search("send an email", 3, exclude=(t for t in [first]))]


@pytest.mark.parametrize("candidates", [None, 5, "Mail/PostBox/send_email"])
def test_bad_rerank_candidates_are_a_type_error(engine: Engine, candidates: Any) -> None:
    with pytest.raises(TypeError, match="candidates") as info:
        engine.rerank("email", candidates)
    assert _raised_by_library(info.value)


QUERY = st.one_of(st.text(max_size=30), SURROGATES, st.just(" \n"), st.sampled_from(["send an email", "weather"]))
QUERY_ARG = st.one_of(QUERY, SCALARS, st.lists(QUERY, max_size=2))
TOP_K = st.one_of(st.integers(-3, 12), st.sampled_from([None, "3", 2.5, math.nan, True, np.int64(2), 10**30]))
EXCLUDE = st.one_of(
    st.lists(st.sampled_from(["Mail/PostBox/send_email", "nope"]), max_size=2),
    st.lists(st.one_of(SCALARS, st.lists(st.text(max_size=2), max_size=1)), max_size=2),
    SCALARS,
)
METHODS = [
    "search",
    "search_detailed",
    "search_batch",
    "search_batch_detailed",
    "asearch",
    "asearch_batch",
    "rerank",
    "retrieve",
]


def _valid_query(q: Any) -> bool:
    return isinstance(q, str) and not any("\ud800" <= ch <= "\udfff" for ch in q)


def _valid_top_k(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1


def _is_collection(x: Any) -> bool:
    return isinstance(x, Iterable) and not isinstance(x, (str, bytes, bytearray, Mapping))


def _valid_exclude(x: Any) -> bool:
    return _is_collection(x) and all(isinstance(t, str) for t in x)


@FUZZ
@pytest.mark.fuzz
@given(method=st.sampled_from(METHODS), query=QUERY_ARG, top_k=TOP_K, exclude=EXCLUDE)
def test_generated_search_arguments(engine: Engine, method: str, query: Any, top_k: Any, exclude: Any) -> None:
    batch = "batch" in method
    if method == "rerank":
        specs = list(engine.catalog)[:4]
        err = _argument_error(lambda: engine.rerank(query, specs, top_k), ["query", "top_k"])
        valid = _valid_query(query) and (top_k is None or _valid_top_k(top_k))
    elif method == "retrieve":  # a batch of queries, checked as search_batch checks them
        err = _argument_error(lambda: engine.retrieve(query, top_k), ["queries", "query", "top_k"])
        valid = _is_collection(query) and all(_valid_query(q) for q in query) and _valid_top_k(top_k)
    else:
        fn = getattr(engine, method)

        def call() -> Any:
            out = fn(query, top_k, exclude=exclude)
            return asyncio.run(out) if asyncio.iscoroutine(out) else out

        err = _argument_error(call, ["queries", "query", "top_k", "exclude"])
        queries_ok = _is_collection(query) and all(_valid_query(q) for q in query) if batch else _valid_query(query)
        valid = queries_ok and _valid_top_k(top_k) and _valid_exclude(exclude)
    assert (err is None) == valid, f"valid={valid}, error={err!r}"


class _RecordingStage(Stage):
    """A natively async stage that records the queries it was run on."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def run(self, query: str, candidates: list, ctx: Any, trace: dict) -> list:
        self.seen.append(query)
        return list(reversed(candidates))

    async def arun(self, query: str, candidates: list, ctx: Any, trace: dict) -> list:
        self.seen.append(query)
        return list(reversed(candidates))


def test_blank_and_long_queries_are_the_same_on_the_native_async_path() -> None:
    from toolrerank_plugins._validate import MAX_QUERY_CHARS

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    stage = _RecordingStage()
    engine.set_stages([stage])
    long_query = "weather forecast " * 1000
    queries = ["send an email", "   ", long_query]
    sync = engine.search_batch_detailed(queries, 3)
    asy = asyncio.run(engine.asearch_batch_detailed(queries, 3))
    assert [[r.id for r in s.results] for s in sync] == [[r.id for r in a.results] for a in asy]
    assert sync[1].results == [] and asy[1].results == []
    assert sync[2].query == asy[2].query == long_query[:MAX_QUERY_CHARS]
    assert stage.seen == ["send an email", long_query[:MAX_QUERY_CHARS]] * 2  # the blank query ran no stage
    specs = list(engine.catalog)[:3]
    assert [r.id for r in asyncio.run(engine.arerank(" ", specs))] == [s.id for s in specs]
    assert [r.id for r in engine.rerank("mail", specs)] == [s.id for s in reversed(specs)]
    for call in (
        lambda: asyncio.run(engine.asearch_batch("email", 3)),
        lambda: asyncio.run(engine.asearch("email", 2.5)),
        lambda: asyncio.run(engine.arerank("email", specs, "1")),
    ):
        with pytest.raises(TypeError, match="queries|top_k"):
            call()


# -- configs: nothing that would not save and load back (fuzz findings 1, 7, 8, 9) --------------------
NON_FINITE = st.sampled_from([math.inf, -math.inf, math.nan]) | st.floats().filter(lambda x: not math.isfinite(x))
#: Where a float sits in an EngineConfig: typed fields, and the untyped ``params`` of a stage.
FLOAT_PLACES = st.sampled_from(
    [
        lambda v: {"retriever": "bm25", "bm25": {"k1": v}},
        lambda v: {"retriever": "bm25", "bm25": {"b": v}},
        lambda v: {"retriever": "hybrid", "hybrid": {"dense_weight": v, "fusion": "minmax"}},
        lambda v: {"retriever": "hybrid", "hybrid": {"bm25_weight": v}},
        lambda v: {"retriever": "bm25", "stages": [{"type": "multi_intent", "params": {"whole_weight": v}}]},
        lambda v: {"retriever": "bm25", "stages": [{"type": "custom", "params": {"deep": [{"x": v}]}}]},
    ]
)
#: Where text sits in an EngineConfig.
TEXT_PLACES = st.sampled_from(
    [
        lambda t: {"render": {"separator": t}},
        lambda t: {"dense": {"query_prefix": t}},
        lambda t: {"dense": {"model_name_or_path": t}},
        lambda t: {"stages": [{"type": "multi_intent", "name": t}]},
        lambda t: {"stages": [{"type": "custom", "params": {"label": [t]}}]},
        lambda t: {"stages": [{"type": "custom", "params": {t: 1}}]},
    ]
)


@FUZZ
@pytest.mark.fuzz
@given(place=FLOAT_PLACES, value=NON_FINITE)
def test_generated_non_finite_config_values_are_rejected(place: Callable[[float], dict], value: float) -> None:
    # An infinite stage parameter used to validate, save as null, and make the saved engine unloadable.
    with pytest.raises(ValidationError, match="finite"):
        EngineConfig.model_validate(place(value))


@FUZZ
@pytest.mark.fuzz
@given(place=TEXT_PLACES, text=st.tuples(st.text(max_size=4), SURROGATES, st.text(max_size=4)).map("".join))
def test_generated_lone_surrogates_in_config_text_are_rejected(place: Callable[[str], dict], text: str) -> None:
    # A surrogate in render.separator used to validate, then make save raise UnicodeEncodeError.
    with pytest.raises(ValidationError, match="lone surrogate"):
        EngineConfig.model_validate(place(text))


@FUZZ
@pytest.mark.fuzz
@given(value=HUGE_INTS.filter(lambda v: abs(v) > 2**1024))
def test_generated_huge_config_integers_are_rejected(value: int) -> None:
    with pytest.raises(ValidationError, match="too large"):
        EngineConfig.model_validate({"depth": value})
    with pytest.raises(ValidationError, match="too large"):
        EngineConfig.model_validate({"stages": [{"type": "custom", "params": {"n": value}}]})


def test_stage_config_models_reject_non_finite_values_too() -> None:
    from toolrerank_plugins.rerank.intents import MultiIntentConfig

    with pytest.raises(ValidationError, match="finite"):
        MultiIntentConfig(whole_weight=math.inf)
    spec = StageSpec.model_construct(type="multi_intent", name=None, params={"whole_weight": math.inf})
    config = EngineConfig.model_construct(retriever="bm25", stages=[spec])  # built without validation
    with pytest.raises(ConfigError, match="finite"):
        Engine.build(tiny_catalog(), config)


def test_valid_configs_still_validate() -> None:
    cfg = EngineConfig.model_validate(
        {
            "retriever": "hybrid",
            "render": {"separator": " · "},
            "stages": [{"type": "multi_intent", "name": "mi é", "params": {"whole_weight": 0.5, "x": [1, "ü"]}}],
        }
    )
    assert EngineConfig.model_validate(cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("stopwords", ["xx", "", "EN", "englishh"])
def test_unknown_bm25_stopword_lists_are_rejected_at_config_time(stopwords: str) -> None:
    # bm25s raised its own ValueError in Engine.build
    with pytest.raises(ValidationError, match="unknown stopword list"):
        EngineConfig(retriever="bm25", bm25={"stopwords": stopwords})


@pytest.mark.parametrize("stopwords", [None, "en", "english", "de", "en_plus"])
def test_known_bm25_stopword_lists_build(stopwords: str | None) -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", bm25={"stopwords": stopwords}))
    assert engine.search("send an email", 2)


@pytest.mark.parametrize(
    "field, value", [("hnsw_m", 2**40), ("hnsw_m", 1025), ("hnsw_ef_search", 2**31), ("hnsw_ef_construction", 2**40)]
)
def test_hnsw_sizes_have_upper_bounds(field: str, value: int) -> None:
    # faiss raised a TypeError (no C int) in Engine.build
    with pytest.raises(ValidationError, match="less than or equal"):
        EngineConfig(retriever="dense", dense={"index": "hnsw", field: value})


# -- edges: text that saves and weights that are numbers (fuzz findings 2 and 3) ---------------------
@FUZZ
@pytest.mark.fuzz
@given(field=st.sampled_from(["type", "origin"]), text=st.tuples(st.text(max_size=3), SURROGATES).map("".join))
def test_generated_lone_surrogates_in_edges_are_rejected(field: str, text: str) -> None:
    # was accepted in memory; the saved engine could then not load
    a, b = ToolSpec(id="a", name="a"), ToolSpec(id="b", name="b")
    with pytest.raises(CatalogError, match="lone surrogate"):
        Catalog([a, b], edges=[Edge("a", "b", **{field: text})])


@FUZZ
@pytest.mark.fuzz
@given(weight=st.one_of(HUGE_INTS.filter(lambda v: v > 2**1030), HUGE_INTS.map(lambda v: -v - 2**1030), NON_FINITE))
def test_generated_unrepresentable_edge_weights_are_rejected(weight: Any) -> None:
    # 10**400 raised OverflowError from math.isfinite
    a, b = ToolSpec(id="a", name="a"), ToolSpec(id="b", name="b")
    with pytest.raises(CatalogError, match="weight must be a finite number"):
        Catalog([a, b], edges=[Edge("a", "b", weight=weight)])


def test_edge_reproducers() -> None:
    a, b = ToolSpec(id="a", name="a"), ToolSpec(id="b", name="b")
    with pytest.raises(CatalogError, match="edge type holds a lone surrogate"):
        Catalog([a, b], edges=[Edge("a", "b", type="\ud800")])
    with pytest.raises(CatalogError, match="finite"):
        Catalog([a, b], edges=[Edge("a", "b", weight=10**400)])
    assert Catalog([a, b], edges=[Edge("a", "b", weight=10**300)]).edges[0].weight == 10**300


def test_conversation_query_replaces_lone_surrogates_in_earlier_turns_only() -> None:
    from toolrerank_plugins.selection import Turn, conversation_query

    turns = [Turn("user", "weather in Paris?"), Turn("assistant", "today \udc80 or later?"), Turn("user", "tomorrow")]
    assert conversation_query(turns) == "weather in Paris?\ntoday \ufffd or later?\ntomorrow"
    # the current request is left to the search's own check (a ValueError naming the problem)
    assert conversation_query([Turn("user", "mail \ud800")]) == "mail \ud800"


# -- query text from anywhere: only the library's errors escape (probe of 2026-11-26) -------------------
#: Query text as an agent passes it on: any code point (lone surrogates too), NUL bytes, control characters,
#: very long runs (cut to MAX_QUERY_CHARS), joined in any order.
QUERY_PIECES = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=12),
    st.sampled_from(["\ud800", "\udfff", "\udc80", "\ud83d", "\x00", "\x00\x00", "\r\n", "\u200b", "\ufeff"]),
    st.sampled_from(["send an email", "weather forecast", "log in", " "]),
    st.builds(lambda s, n: s * n, st.sampled_from(["a", "mail ", "\x00", "é ", "🌦"]), st.integers(1, 20_000)),
)
QUERY_TEXTS = st.lists(QUERY_PIECES, min_size=0, max_size=4).map("".join)
ENTRY_POINTS = [
    "search",
    "search_detailed",
    "search_batch",
    "search_batch_detailed",
    "asearch",
    "asearch_batch",
    "asearch_detailed",
    "asearch_batch_detailed",
    "rerank",
    "arerank",
    "retrieve",
    "cli_search",
]


class _LLMStage(Stage):
    """Passes the query and an LLM-made text with a NUL byte through ``ctx.retrieve``, as LLM stages do."""

    name = "llm_like"

    def run(self, query: str, candidates: list, ctx: Any, trace: dict) -> list:
        found = ctx.retrieve([query, "send \x00 an email " + query[:40]], 5)
        return [*found[1], *(c for c in candidates if c.id not in {f.id for f in found[1]})]


@pytest.fixture(scope="module")
def query_engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    engines = {
        r: Engine.build(tiny_catalog(), EngineConfig(retriever=r), embedder=FakeEmbedder(32))
        for r in ("bm25", "dense", "hybrid")
    }
    engines["bm25"].set_stages([_LLMStage()])
    saved = tmp_path_factory.mktemp("cli") / "eng"
    Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")).save(saved)
    return {"engines": engines, "saved": saved}


def _call_entry_point(engine: Engine, saved: Path, method: str, query: str) -> Any:
    specs = list(engine.catalog)[:4]
    if method == "cli_search":
        import contextlib
        import io

        from toolrerank_plugins.cli.main import main

        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                code = main(["search", str(saved), query, "--top-k", "3"])
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
        assert code in (0, 2), (code, err.getvalue())
        assert "Traceback" not in err.getvalue()
        if code == 2:
            assert err.getvalue().startswith("usage:") or "toolrerank: error:" in err.getvalue(), err.getvalue()
            raise ToolRerankError(err.getvalue())  # a usage error naming the problem: the CLI's library error
        return None
    if method in ("rerank", "arerank"):
        out = getattr(engine, method)(query, specs, 3)
    elif method == "retrieve":
        out = engine.retrieve([query, "weather"], 3)
    elif "batch" in method:
        out = getattr(engine, method)(["weather", query], 3)
    else:
        out = getattr(engine, method)(query, 3)
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


@FUZZ
@pytest.mark.fuzz
@given(method=st.sampled_from(ENTRY_POINTS), retriever=st.sampled_from(["bm25", "dense", "hybrid"]), query=QUERY_TEXTS)
def test_generated_query_text_raises_only_library_errors(
    query_engines: dict[str, Any], method: str, retriever: str, query: str
) -> None:
    # 374 of 9,000 fuzzed queries raised a builtin ValueError (a lone surrogate) from every entry point
    engine = query_engines["engines"][retriever]
    valid = not any("\ud800" <= ch <= "\udfff" for ch in query)
    try:
        _call_entry_point(engine, query_engines["saved"], method, query)
    except ToolRerankError as exc:
        if method == "cli_search" and valid and not query.strip():  # `toolrerank search ENGINE ""`: a usage error
            assert "the query is empty" in str(exc), exc
            event("refused (empty query on the command line)")
            return
        assert not valid, f"{method} refused valid text: {exc!r}"
        assert "surrogate" in str(exc) or "UTF-8" in str(exc), exc
        event("refused (library error)")
        return
    except Exception as exc:  # noqa: BLE001 - anything else escaping is the failure under test
        raise AssertionError(f"{method} raised {type(exc).__name__}, not a library error: {exc!r:.300}") from exc
    assert valid, f"{method} accepted a query with a lone surrogate"
    event("answered")


@pytest.mark.parametrize("query", ["\ud800", "mail \udfff me", "ok \ud83d"])
def test_a_lone_surrogate_is_a_query_error_from_every_entry_point(query_engines: dict[str, Any], query: str) -> None:
    from toolrerank_plugins.errors import QueryError

    engine = query_engines["engines"]["hybrid"]
    for method in ENTRY_POINTS[:-1]:
        with pytest.raises(QueryError, match="surrogate") as info:
            _call_entry_point(engine, query_engines["saved"], method, query)
        assert isinstance(info.value, ValueError) and isinstance(info.value, ToolRerankError)  # both still hold
