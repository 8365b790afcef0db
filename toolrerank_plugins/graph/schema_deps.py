"""Zero-training dependency detection from JSON Schemas: a ``returns`` property feeding a parameter.

API ``b`` is a prerequisite of API ``a`` (edge ``b -> a``) when a property that ``b`` returns has the same
normalised name as a parameter of ``a`` (``token`` -> ``token``, ``userId`` -> ``user_id``, ``location_id``
-> ``locationId``) and compatible types. Names returned by many APIs in a scope (``status``, ``id``,
``message``) say nothing about data flow, so a name is skipped when more than ``max_producers`` APIs of a
scope return it; a small stop list removes the most generic ones up front.

A shared name alone is weak evidence: ``target``, ``year`` or ``distance`` mean different things in different
services. Between APIs of *different* tools (MCP servers, OpenAPI services; in a flat catalog every API is
its own tool) an edge therefore needs *typed id evidence* (``cross_tool="typed_id"``, the default): the name
is id-like (its last word is ``id``, ``token``, ``key``, ``number``, ... see :data:`ID_WORDS`) and both
sides declare the same scalar type (an ``integer`` id may feed a ``string`` one); an untyped or ``$ref``'d
field never qualifies. Inside one tool the bare name match is kept (``same_tool="name"``). Edges carry
their evidence as a weight: 1.0 for typed id evidence, ``weak_weight`` (0.5) for a bare name match.

Matching goes through an inverted index (name -> producers, name -> consumers) inside each scope, so the
cost grows with the number of APIs and matches, not with the number of pairs.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.records import Edge, ToolSpec

logger = logging.getLogger(__name__)

Scope = Literal["auto", "tool", "category", "all"]

#: Names too generic to carry a dependency on their own.
GENERIC_NAMES = frozenset(
    {
        "status",
        "message",
        "msg",
        "success",
        "error",
        "errors",
        "result",
        "results",
        "data",
        "code",
        "response",
        "output",
        "value",
        "info",
        "details",
        "description",
        "type",
        "text",
        "content",
        "count",
        "total",
        "limit",
        "page",
        "offset",
        "format",
        "lang",
        "language",
        "callback",
        "query",
        "q",
        "date",
        "time",
        "timestamp",
        "name",
        "title",
        "url",
        "items",
        "list",
        "meta",
        "body",
    }
)

#: Last words of an id-like name (``user_id``, ``access_token``, ``api_key``, ``order_number``, ``sku``).
ID_WORDS = frozenset(
    {"id", "ids", "uuid", "guid", "token", "key", "hash", "handle", "number", "num", "no", "sku", "isbn", "cik", "slug"}
)

Evidence = Literal["typed_id", "name", "none"]

_SCALARS = {"string", "integer", "number"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^0-9a-zA-Z]+")


class SchemaConfig(ConfigModel):
    """Settings of the schema-based detector.

    Attributes:
        required_only: use only required parameters as inputs; ``"auto"`` falls back to all parameters
            for an API that marks none as required (API-Bank marks none).
        max_producers: skip a name returned by more than this many APIs in a scope (too generic).
        max_consumers: skip a name taken by more than this many APIs in a scope.
        min_name_chars: ignore names shorter than this after normalisation.
        scope: which APIs may depend on each other: ``tool`` (same tool), ``category`` (same category),
            ``all``; ``auto`` picks ``all`` for catalogs up to ``all_scope_max`` APIs, else ``tool`` for
            catalogs with a hierarchy and ``category`` for flat ones.
        all_scope_max: catalog size up to which ``auto`` means ``all``.
        cross_tool: evidence needed between APIs of different tools: ``typed_id`` (an id-like name with
            the same declared scalar type on both sides), ``name`` (any shared name with compatible types:
            the behaviour before typed evidence), or ``none`` (no edges between tools).
        same_tool: evidence needed between APIs of one tool: ``name`` or ``typed_id``.
        id_words: last words that make a name id-like (see :data:`ID_WORDS`).
        weak_weight: weight of an edge whose only evidence is a shared name (typed id evidence weighs 1.0).
    """

    model_config = ConfigDict(extra="forbid")

    required_only: bool | Literal["auto"] = "auto"
    max_producers: int = Field(3, ge=1)
    max_consumers: int = Field(50, ge=1)
    min_name_chars: int = Field(3, ge=1)
    scope: Scope = "auto"
    all_scope_max: int = Field(2000, ge=1)
    cross_tool: Evidence = "typed_id"
    same_tool: Literal["typed_id", "name"] = "name"
    id_words: list[str] = Field(default_factory=lambda: sorted(ID_WORDS))
    weak_weight: float = Field(0.5, ge=0.0, le=1.0)


def normalise_name(name: str) -> str:
    """``userId`` / ``user-id`` / ``USER_ID`` -> ``user_id``.

    Example:
        >>> normalise_name("originSkyId"), normalise_name("access-token")
        ('origin_sky_id', 'access_token')
    """
    parts = [p for p in _NON_WORD.split(_CAMEL.sub("_", str(name))) if p]
    return "_".join(p.lower() for p in parts)


def _type_of(prop: Any) -> str | None:
    """The declared type of a property: ``type``, or the one non-null type of a ``["string", "null"]`` list
    or an ``anyOf`` / ``oneOf`` (optional fields); ``None`` when untyped (a bare ``$ref`` included)."""
    if not isinstance(prop, Mapping):
        return None
    t = prop.get("type")
    if isinstance(t, str):
        return t.lower()
    if isinstance(t, (list, tuple)):
        types = {x.lower() for x in t if isinstance(x, str)} - {"null"}
        return types.pop() if len(types) == 1 else None
    for key in ("anyOf", "oneOf"):
        options = prop.get(key)
        if isinstance(options, (list, tuple)):
            found = {_type_of(o) for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")}
            return found.pop() if len(found) == 1 else None
    return None


def types_compatible(a: str | None, b: str | None) -> bool:
    """Unknown types match anything; scalars (string/integer/number) match each other (ids are both)."""
    if a is None or b is None or a == b:
        return True
    if a in _SCALARS and b in _SCALARS:
        return True
    # An array of ids can feed a scalar id parameter one element at a time, and the other way round.
    return {a, b} <= _SCALARS | {"array"} and "boolean" not in (a, b)


def is_id_name(name: str, id_words: Iterable[str] = ID_WORDS) -> bool:
    """Whether a normalised name names an identifier: its last word is id-like (``user_id``, ``token``).

    Example:
        >>> is_id_name("access_token"), is_id_name("order_number"), is_id_name("target")
        (True, True, False)
    """
    words = name.split("_")
    return bool(words) and words[-1] in set(id_words)


def typed_match(a: str | None, b: str | None) -> bool:
    """Both types declared and the same scalar (or array) type; an ``integer`` id may feed a ``string`` one.

    Example:
        >>> typed_match("string", "string"), typed_match("integer", "string"), typed_match(None, "string")
        (True, True, False)
    """
    if a is None or b is None:
        return False
    if a == b:
        return a in _SCALARS or a == "array"
    return {a, b} == {"integer", "string"}


def returned_names(spec: ToolSpec) -> dict[str, str | None]:
    """Normalised top-level (and one level of nested / array-item) property names an API returns -> type."""
    out: dict[str, str | None] = {}
    ret = spec.returns
    if not isinstance(ret, Mapping):
        return out

    def visit(schema: Mapping[str, Any], depth: int) -> None:
        props = schema.get("properties")
        if isinstance(props, Mapping):
            for name, prop in props.items():
                out.setdefault(normalise_name(name), _type_of(prop))
                if depth < 1 and isinstance(prop, Mapping):
                    visit(prop, depth + 1)
        items = schema.get("items")
        if isinstance(items, Mapping) and depth < 2:
            visit(items, depth + 1)

    visit(ret, 0)
    return out


def input_names(spec: ToolSpec, required_only: bool | Literal["auto"] = "auto") -> dict[str, str | None]:
    """Normalised parameter names an API takes -> type (required ones, see :class:`SchemaConfig`)."""
    props = spec.parameters.get("properties") or {}
    required = list(spec.parameters.get("required") or [])
    use_required = required_only is True or (required_only == "auto" and bool(required))
    names = required if use_required else list(props)
    return {normalise_name(n): _type_of(props.get(n)) for n in names}


def resolve_scope(catalog: Catalog, scope: Scope, all_scope_max: int) -> Literal["tool", "category", "all"]:
    if scope != "auto":
        return scope
    if len(catalog) <= all_scope_max:
        return "all"
    return "tool" if catalog.has_hierarchy else "category"


def scope_key(spec: ToolSpec, scope: Literal["tool", "category", "all"]) -> str:
    if scope == "all":
        return ""
    if scope == "tool":
        return spec.tool_key
    return spec.category or spec.tool_key


def _usable(name: str, cfg: SchemaConfig) -> bool:
    return len(name) >= cfg.min_name_chars and name not in GENERIC_NAMES


class SchemaDependencyDetector:
    """Finds ``returns -> parameter`` data flow between APIs without any training.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> edges = SchemaDependencyDetector().detect(tiny_catalog())
        >>> sorted((e.source.split("/")[-1], e.target.split("/")[-1]) for e in edges)
        [('login', 'logout'), ('login', 'update_email')]
    """

    def __init__(self, config: SchemaConfig | None = None) -> None:
        self.config = config or SchemaConfig()

    def detect(self, catalog: Catalog, *, only: Iterable[str] | None = None) -> list[Edge]:
        """Schema edges of ``catalog``; with ``only``, just the edges touching those API ids."""
        cfg = self.config
        scope = resolve_scope(catalog, cfg.scope, cfg.all_scope_max)
        focus = None if only is None else set(only)
        producers: dict[tuple[str, str], list[tuple[str, str, str | None]]] = defaultdict(list)
        consumers: dict[tuple[str, str], list[tuple[str, str, str | None]]] = defaultdict(list)
        for spec in catalog:
            key = scope_key(spec, scope)
            for name, typ in returned_names(spec).items():
                if _usable(name, cfg):
                    producers[(key, name)].append((spec.id, spec.tool_key, typ))
            for name, typ in input_names(spec, cfg.required_only).items():
                if _usable(name, cfg):
                    consumers[(key, name)].append((spec.id, spec.tool_key, typ))
        found: dict[tuple[str, str], float] = {}
        skipped_generic = 0
        for k, prods in producers.items():
            cons = consumers.get(k)
            if not cons:
                continue
            if len(prods) > cfg.max_producers or len(cons) > cfg.max_consumers:
                skipped_generic += 1
                continue
            for src, src_tool, st in prods:
                for dst, dst_tool, dt in cons:
                    if src == dst or (focus is not None and src not in focus and dst not in focus):
                        continue
                    weight = self._weight(k[1], st, dt, same_tool=src_tool == dst_tool)
                    if weight is not None and weight > found.get((src, dst), -1.0):
                        found[(src, dst)] = weight
        if skipped_generic:
            logger.debug("schema detector skipped %d names returned/taken by too many APIs", skipped_generic)
        return [
            Edge(src, dst, type="data_flow", origin="schema", weight=weight)
            for (src, dst), weight in sorted(found.items())
        ]

    def _weight(self, name: str, out_type: str | None, in_type: str | None, *, same_tool: bool) -> float | None:
        """Edge weight for one shared name, or ``None`` when it is not evidence enough (see the module docs)."""
        cfg = self.config
        rule = cfg.same_tool if same_tool else cfg.cross_tool
        if rule == "none" or not types_compatible(out_type, in_type):
            return None
        if is_id_name(name, cfg.id_words) and typed_match(out_type, in_type):
            return 1.0
        return cfg.weak_weight if rule == "name" else None

    def evidence(self, producer: ToolSpec, consumer: ToolSpec) -> list[str]:
        """Names through which ``producer``'s output can feed ``consumer`` (for explanations).

        The same rules as :meth:`detect` for one pair (the per-scope fan-out caps aside).
        """
        outs = returned_names(producer)
        ins = input_names(consumer, self.config.required_only)
        same = producer.tool_key == consumer.tool_key
        return sorted(
            n
            for n in outs.keys() & ins.keys()
            if _usable(n, self.config) and self._weight(n, outs[n], ins[n], same_tool=same) is not None
        )

    def compatible_pairs(self, catalog: Catalog, *, max_fanout: int = 20) -> set[tuple[str, str]]:
        """Unordered pairs sharing any usable name between one's outputs and the other's inputs.

        Looser than :meth:`detect` (candidates for a discriminator, not edges); ``max_fanout`` caps how
        many APIs one name may link inside a scope.
        """
        cfg = self.config
        scope = resolve_scope(catalog, cfg.scope, cfg.all_scope_max)
        producers: dict[tuple[str, str], set[str]] = defaultdict(set)
        consumers: dict[tuple[str, str], set[str]] = defaultdict(set)
        for spec in catalog:
            key = scope_key(spec, scope)
            for name in returned_names(spec):
                if _usable(name, cfg):
                    producers[(key, name)].add(spec.id)
            for name in input_names(spec, False):
                if _usable(name, cfg):
                    consumers[(key, name)].add(spec.id)
        out: set[tuple[str, str]] = set()
        for k, prods in producers.items():
            cons = consumers.get(k)
            if not cons or len(prods) > max_fanout or len(cons) > max_fanout:
                continue
            for a in prods:
                for b in cons:
                    if a != b:
                        out.add((a, b) if a < b else (b, a))
        return out
