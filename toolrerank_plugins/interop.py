"""Framework-neutral pieces the adapters share, so LangChain and LlamaIndex results look the same.

The adapter packages only map these onto their own types (``Document``, ``NodeWithScore``, tools).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from toolrerank_plugins._validate import check_top_k as check_top_k  # re-exported: adapters check their counts
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig, default_config
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber

T = TypeVar("T")
R = TypeVar("R")

#: Metadata keys every adapter writes (on a copy of the input's metadata).
TOOL_ID, NAME, TOOL, CATEGORY, SCORE, RANK, STAGE_SCORES = (
    "tool_id",
    "name",
    "tool",
    "category",
    "score",
    "rank",
    "stage_scores",
)
#: Metadata key of an agent's tool selection that a fallback filled: why (see ``agents.BaseToolSelector.rank``).
SELECTION_REASON = "selection_reason"

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def result_metadata(st: ScoredTool) -> dict[str, Any]:
    """The fixed metadata keys for one ranked tool.

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> result_metadata(ScoredTool(ToolSpec("a/b", "b", tool="a"), 0.5, 1))["tool_id"]
        'a/b'
    """
    return {
        TOOL_ID: st.tool.id,
        NAME: st.tool.name,
        TOOL: st.tool.tool,
        CATEGORY: st.tool.category,
        SCORE: st.score,
        RANK: st.rank,
        STAGE_SCORES: dict(st.stage_scores),
    }


def read_tool_schema(name: object, schema_of: Callable[[], T]) -> T:
    """``schema_of()``: a framework's conversion of one tool's argument schema to JSON Schema, whose failures
    (a ``$ref`` that points nowhere, a schema nested past the recursion limit, a field pydantic cannot describe,
    a schema class that is not a model) are a :class:`CatalogError` naming the tool, not the framework's
    ``KeyError`` / ``ValueError`` / ``RecursionError`` / ``AttributeError``.

    Example:
        >>> read_tool_schema("t", lambda: {}["missing"])
        Traceback (most recent call last):
        ...
        toolrerank_plugins.errors.CatalogError: tool 't': cannot read its argument schema (KeyError: 'missing')
    """
    from pydantic import PydanticUserError  # pydantic is a core dependency; imported here to keep this module light

    try:
        return schema_of()
    # UnicodeError is a ValueError; PydanticUserError covers a field pydantic cannot describe in JSON Schema
    # (PydanticInvalidForJsonSchema, a RuntimeError), which is pydantic's documented error for it in every 2.x.
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError, PydanticUserError) as exc:
        raise CatalogError(
            f"tool {name!r:.80}: cannot read its argument schema ({type(exc).__name__}: {exc!s:.200})"
        ) from exc


def function_names(specs: Iterable[ToolSpec]) -> dict[str, str]:
    """Tool-calling names for specs, by id: the API name when it is a valid function name and unique,
    else the id with invalid characters replaced (plus a short sha256 when that is too long or taken).

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> function_names([ToolSpec("A/x", "get"), ToolSpec("B/y", "get"), ToolSpec("C/z", "ok")])
        {'A/x': 'A_x', 'B/y': 'B_y', 'C/z': 'ok'}
    """
    specs = list(specs)
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.name] = counts.get(s.name, 0) + 1
    out: dict[str, str] = {}
    taken: set[str] = set()
    for s in specs:
        name = s.name
        if not (_FUNCTION_NAME.match(name) and counts[name] == 1):
            name = re.sub(r"[^A-Za-z0-9_-]+", "_", s.id).strip("_") or "tool"
            if len(name) > 64 or name in taken or name in counts:
                digest = hashlib.sha256(s.id.encode("utf-8")).hexdigest()[:8]
                name = f"{name[:55]}_{digest}"
        taken.add(name)
        out[s.id] = name
    return out


# -- tools <-> engine (the adapters' ``from_tools`` / ``from_engine``) ------------------------------------
def require_tools(catalog_ids: Iterable[str], tools: Mapping[str, object], builder: str) -> None:
    """Raise unless every catalog id has a tool (``builder`` names the constructor that indexes the tools).

    Example:
        >>> require_tools(["a", "b"], {"a": print}, "MySelector.from_tools")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: 1 catalog APIs have no tool (first: ['b']); ... with MySelector.from_tools
    """
    missing = [i for i in catalog_ids if i not in tools]
    if missing:
        raise ValueError(
            f"{len(missing)} catalog APIs have no tool (first: {missing[:3]}); pass a tool for every id "
            f"in engine.catalog, or build the engine from the tools with {builder}"
        )


def engine_for_tools(
    specs: Iterable[ToolSpec],
    config: EngineConfig | None = None,
    *,
    embedder: Embedder | None = None,
    source: str = "<tools>",
    resources: Mapping[str, Any] | None = None,
) -> Engine:
    """An engine over a framework's tools, converted to specs (id = tool name) by the adapter; without a
    ``config``, the recommended pipeline (:func:`~toolrerank_plugins.config.default_config`). ``resources``: live
    objects for the first stage (a PostgreSQL pool, see :mod:`toolrerank_plugins.postgres`).

    Example:
        >>> engine = engine_for_tools([ToolSpec("get_weather", "get_weather", "Weather forecast")],
        ...                           EngineConfig(retriever="bm25"))
        >>> engine.catalog.ids
        ['get_weather']
    """
    catalog = Catalog(list(specs), source=source)
    return Engine.build(catalog, config or default_config(), embedder=embedder, resources=resources)


def ids_by_function_name(engine: Engine | None, explicit: Mapping[str, str] | None = None) -> dict[str, str]:
    """Catalog id of each tool-calling name of ``engine``'s APIs (:func:`function_names` inverted), with the
    ``explicit`` ``{name: id}`` entries winning; usage recorders map the tool calls they see back to ids.

    Example:
        >>> engine = engine_for_tools([ToolSpec("Weather/now", "now", "Weather now")], EngineConfig(retriever="bm25"))
        >>> ids_by_function_name(engine, {"legacy_now": "Weather/now"})
        {'now': 'Weather/now', 'legacy_now': 'Weather/now'}
    """
    names = {} if engine is None else {name: tid for tid, name in function_names(engine.catalog).items()}
    names.update(explicit or {})
    return names


def tools_for_engine(
    engine: Engine,
    implementations: Mapping[str, Callable[..., Any]],
    make_tool: Callable[[ToolSpec, Callable[..., Any], str], T],
) -> dict[str, T]:
    """A framework tool for each API of the engine's catalog, by id: ``make_tool(spec, implementation,
    name)`` with tool-calling names from :func:`function_names`. Raises when an API has no implementation.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> impls = {i: print for i in engine.catalog.ids}
        >>> tools_for_engine(engine, impls, lambda spec, fn, name: name)["Weather/SkyCast/current"]
        'current_weather'
    """
    specs = [engine.catalog[i] for i in engine.catalog.ids]
    missing = [s.id for s in specs if s.id not in implementations]
    if missing:
        raise ValueError(f"no implementation for {len(missing)} APIs (first: {missing[:3]})")
    names = function_names(specs)
    return {s.id: make_tool(s, implementations[s.id], names[s.id]) for s in specs}


def lookup_first(tool_id: str | None, found: Sequence[ScoredTool], catalog: Catalog) -> list[ScoredTool]:
    """``found`` with the catalog API ``tool_id`` in front (``stage_scores`` ``{"name": 1.0}``), if it is not
    already there; ``found`` as it is for ``None`` or an id the catalog lacks.

    Agent frameworks look a tool up by name through the same retriever (LlamaIndex's ``ObjectRetriever``);
    an exact name must always find its tool, whatever the ranking says.

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> catalog = Catalog([ToolSpec("a", "a"), ToolSpec("b", "b")])
        >>> [st.id for st in lookup_first("b", [ScoredTool(catalog["a"], 0.5, 1)], catalog)]
        ['b', 'a']
        >>> [st.id for st in lookup_first("a", [ScoredTool(catalog["a"], 0.5, 1)], catalog)]
        ['a']
    """
    spec = catalog.get(tool_id) if tool_id is not None else None
    if spec is None or any(st.id == spec.id for st in found):
        return list(found)
    return renumber([ScoredTool(spec, 1.0, 1, {"name": 1.0}), *found])


# -- results back to the caller's documents / nodes (compressors and postprocessors) ----------------------
def back_to_inputs(
    inputs: Sequence[T],
    specs: Sequence[ToolSpec],
    ranked: Sequence[ScoredTool],
    rescored: Callable[[T, ScoredTool], R],
    brought_in: Callable[[ScoredTool], R],
) -> list[R]:
    """:meth:`Engine.rerank`'s ranking of ``specs`` (the tools ``inputs`` stand for, in order) as the caller's
    items: the one behaviour of the LangChain compressor and the LlamaIndex postprocessor.

    * a ranked tool that an input stands for becomes ``rescored(input, scored)`` (a copy of the input with the
      ranking in its metadata); a repeated id maps to its first input, as the engine keeps its first occurrence;
    * a ranked tool that no input stands for, because a stage brought it in (the ``tgr`` stage's
      prerequisites, the hierarchy stage's sibling APIs), becomes ``brought_in(scored)``: a new item built from
      the catalog, at its rank, since the pipeline ranks it among the tools the request needs.

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> login, update = ToolSpec("login", "login"), ToolSpec("update_email", "update_email")
        >>> ranked = [ScoredTool(login, 2.0, 1), ScoredTool(update, 1.0, 2)]  # a stage brought in login
        >>> back_to_inputs(["doc: update e-mail"], [update], ranked, lambda doc, st: doc, lambda st: f"new: {st.id}")
        ['new: login', 'doc: update e-mail']
    """
    by_id: dict[str, T] = {}
    for item, spec in zip(inputs, specs):
        by_id.setdefault(spec.id, item)
    return [rescored(by_id[st.id], st) if st.id in by_id else brought_in(st) for st in ranked]
