"""Frozen records shared by every stage: tool specs, scored results, labelled queries, edges."""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolrerank_plugins.errors import CatalogError


class FrozenDict(dict[str, Any]):
    """A read-only ``dict``: the mappings inside a :class:`ToolSpec`'s JSON fields.

    It is a ``dict`` so that JSON tools take it as it is (``json.dumps(spec.parameters)``; a
    ``types.MappingProxyType``, used before, is refused by ``json``), and every method that would change it
    raises ``TypeError``. ``copy()`` and ``dict(frozen)`` give a plain, mutable shallow copy, as
    ``MappingProxyType.copy()`` did. Unhashable like ``dict``; ``==`` compares contents with any mapping.

    Example:
        >>> import json
        >>> spec = ToolSpec(id="a", name="a", parameters={"type": "object", "properties": {"x": {"type": "string"}}})
        >>> json.dumps(spec.parameters["properties"])
        '{"x": {"type": "string"}}'
        >>> spec.parameters["type"] = "array"
        Traceback (most recent call last):
        ...
        TypeError: 'FrozenDict' object is read-only (a frozen JSON value); copy it with dict(...) to change it
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> FrozenDict:
        self = super().__new__(cls)
        dict.update(self, *args, **kwargs)  # filled here, once: __init__ (which callers may call again) does nothing
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{type(self).__name__!r} object is read-only (a frozen JSON value); copy it with dict(...) to change it"
        )

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[Any, ...]:  # copy, deepcopy and pickle rebuild it through __new__
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


_EMPTY: Mapping[str, Any] = FrozenDict()

#: Deepest nesting of containers (mappings and lists) a JSON field of a :class:`ToolSpec` may have; the
#: field's own mapping is level 1. Real schemas stay far below it; deeper data is refused rather than
#: risking Python's recursion limit when the spec is frozen, rendered or saved.
MAX_NESTING = 64
#: Most values (containers and scalars) one JSON field may hold: shared sub-objects are counted each time
#: they are reached, so a small in-memory graph that would expand to a huge JSON text is refused.
MAX_JSON_VALUES = 1_000_000
#: Largest integer magnitude (in bits) a JSON field may hold: beyond it Python cannot even print the
#: number (its 4,300-digit limit) and most JSON readers lose it.
MAX_INT_BITS = 1024

_SURROGATE = re.compile("[\ud800-\udfff]")


def find_surrogate(text: str) -> re.Match[str] | None:
    """The first lone surrogate character in ``text`` (text that cannot be written as UTF-8), or None.

    Example:
        >>> find_surrogate("ok"), find_surrogate("a" + chr(0xDC80) + "b").start()
        (None, 1)
    """
    return None if text.isascii() else _SURROGATE.search(text)


def replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: for text that is context rather than the user's
    request (an LLM's output, an earlier turn), where an error would stop the work for one bad character.

    Example:
        >>> replace_surrogates("a" + chr(0xD800) + "b")
        'a\ufffdb'
    """
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def check_text(value: str, what: str) -> None:
    """Raise :class:`CatalogError` if ``value`` holds a lone surrogate (text that cannot be written as UTF-8)."""
    m = find_surrogate(value)
    if m is not None:
        raise CatalogError(
            f"{what} holds a lone surrogate character (U+{ord(m.group()):04X} at position {m.start()}), which "
            "cannot be written as UTF-8; decode the source with errors='replace' or remove it"
        )


def is_finite_number(value: object) -> bool:
    """Whether ``value`` is a real, finite ``int`` or ``float`` (not a ``bool``, NaN or infinity).

    An integer too large for a float (``10**400``, whose ``math.isfinite`` raises ``OverflowError``) is not
    finite: as a score or a weight it would be infinity.

    Example:
        >>> is_finite_number(2), is_finite_number(float("nan")), is_finite_number(10**400), is_finite_number(True)
        (True, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class _Freezer:
    """Checks that a value is plain JSON and returns its deep read-only copy (one pass).

    The path inside the field (``.properties.city[0]``) is kept as a stack and only formatted for an error
    message: loading a large catalog freezes millions of values.
    """

    __slots__ = ("what", "count", "stack", "on_path")

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.stack: list[str | int] = []
        self.on_path: set[int] = set()

    def fail(self, problem: str) -> CatalogError:
        path = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in self.stack)
        return CatalogError(f"{self.what}{path}: {problem}")

    def text(self, value: str, what: str = "") -> str:
        m = find_surrogate(value)
        if m is not None:
            raise self.fail(
                f"{what}holds a lone surrogate character (U+{ord(m.group()):04X} at position {m.start()}), "
                "which cannot be written as UTF-8; decode the source with errors='replace' or remove it"
            )
        return value

    def freeze(self, value: Any, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_JSON_VALUES:
            raise self.fail(f"holds more than {MAX_JSON_VALUES:,} JSON values")
        t = type(value)
        if t is str:
            return value if value.isascii() else self.text(value)
        if value is None or t is bool:
            return value
        if t is int:
            return self._int(value)
        if t is float:
            return self._float(value)
        if t is dict or t is FrozenDict or t is MappingProxyType or t is list or t is tuple:
            return self.container(value, depth)
        # Subclasses (an enum of str, np.float64, OrderedDict ...) are checked like their base type.
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return self._int(value)
        if isinstance(value, float):
            return self._float(value)
        if isinstance(value, (Mapping, list, tuple)):
            return self.container(value, depth)
        raise self.fail(f"{t.__name__} value is not JSON (use str, int, float, bool, None, list, dict)")

    def _int(self, value: int) -> int:
        if value.bit_length() > MAX_INT_BITS:
            raise self.fail(f"integer too large (more than {MAX_INT_BITS} bits) for JSON")
        return value

    def _float(self, value: float) -> float:
        if not math.isfinite(value):
            raise self.fail(f"{value!r} (nan/inf) is not a JSON number")
        return value

    def container(self, value: Any, depth: int) -> Any:
        if depth >= MAX_NESTING:
            raise self.fail(f"nested more than {MAX_NESTING} levels deep (the limit for JSON fields)")
        key = id(value)
        if key in self.on_path:
            raise self.fail("contains itself (a reference cycle); JSON cannot hold cyclic data")
        self.on_path.add(key)
        stack = self.stack
        try:
            t = type(value)
            if (
                t is dict
                or t is FrozenDict
                or t is MappingProxyType
                or (t is not list and t is not tuple and isinstance(value, Mapping))
            ):
                out = {}
                for k, v in value.items():
                    if type(k) is not str and not isinstance(k, str):
                        raise self.fail(f"mapping key {_short(k)} ({type(k).__name__}) is not a string")
                    if not k.isascii():
                        self.text(k, "a key ")
                    stack.append(k)
                    out[k] = self.freeze(v, depth + 1)
                    stack.pop()
                return FrozenDict(out)
            items = []
            for i, v in enumerate(value):
                stack.append(i)
                items.append(self.freeze(v, depth + 1))
                stack.pop()
            return tuple(items)
        finally:
            self.on_path.discard(key)


def _freeze(value: Any, what: str = "value") -> Any:
    """Deep read-only copy of JSON data, so a frozen record cannot be changed through its fields.

    Raises :class:`CatalogError` (naming ``what`` and the path inside it) for anything that is not plain
    JSON: non-string keys, bytes, sets, NaN/infinity, lone surrogates, integers past :data:`MAX_INT_BITS`,
    nesting past :data:`MAX_NESTING`, cycles, or more than :data:`MAX_JSON_VALUES` values.
    """
    return _Freezer(what).freeze(value, 0)


def thaw(value: Any) -> Any:
    """Plain ``dict``/``list`` copy of a value made by :func:`_freeze` (for JSON output)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def stable_id(payload: Mapping[str, Any]) -> str:
    """sha256 of canonical JSON: the same content gives the same id in every process."""
    canonical = json.dumps(thaw(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


_DEFAULT_PARAMETERS: Mapping[str, Any] = _freeze({"type": "object", "properties": {}})
_TEXT_FIELDS = ("id", "name", "description")
_OPTIONAL_TEXT_FIELDS = ("tool", "tool_description", "category")


@dataclass(frozen=True, eq=False, slots=True)
class ToolSpec:
    """One retrievable API.

    The hierarchy is category -> tool -> API. ``tool`` is the parent service; an API without one is
    its own tool (see :attr:`tool_key`).

    Checked when created (a :class:`~toolrerank_plugins.errors.CatalogError` naming the API, the field and
    the problem): ``id``, ``name`` and ``description`` are strings and ``tool``, ``tool_description``,
    ``category`` strings or ``None``, without lone surrogate characters; ``parameters`` (a mapping;
    ``None`` is stored as the empty object schema), ``returns`` (a mapping or ``None``) and ``metadata``
    (a mapping; ``None`` is stored as ``{}``) hold
    plain JSON that can be saved and read back unchanged: string keys; str, finite int/float, bool, None,
    lists and mappings; at most :data:`MAX_NESTING` levels deep, no cycles. Emptiness of ``id``/``name``
    and the JSON Schema shape of ``parameters`` are checked when the spec joins a
    :class:`~toolrerank_plugins.catalog.Catalog`.

    Example:
        >>> spec = ToolSpec(id="Weather/SkyCast/forecast", name="forecast", tool="SkyCast")
        >>> spec.tool_key
        'SkyCast'
        >>> dict(ToolSpec(id="a", name="a", metadata=None).metadata)
        {}
    """

    id: str
    name: str
    description: str = ""
    tool: str | None = None
    tool_description: str | None = None
    category: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=lambda: _DEFAULT_PARAMETERS)
    returns: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise CatalogError(f"API id {_short(self.id)}: 'id' must be a string, got {type(self.id).__name__}")
        check_text(self.id, "API id 'id'")
        api = f"API {self.id!r}"
        for name in _TEXT_FIELDS + _OPTIONAL_TEXT_FIELDS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_TEXT_FIELDS:
                continue
            if not isinstance(value, str):
                kind = "a string or None" if name in _OPTIONAL_TEXT_FIELDS else "a string"
                raise CatalogError(f"{api}: {name!r} must be {kind}, got {type(value).__name__} {_short(value)}")
            check_text(value, f"{api}: {name!r}")
        if self.parameters is None:  # no parameters: the empty object schema, as every loader writes it
            object.__setattr__(self, "parameters", _DEFAULT_PARAMETERS)
        if not isinstance(self.parameters, Mapping):
            raise CatalogError(
                f"{api}: 'parameters' must be a JSON Schema object, got {type(self.parameters).__name__}"
            )
        if self.returns is not None and not isinstance(self.returns, Mapping):
            raise CatalogError(
                f"{api}: 'returns' must be a JSON Schema mapping or null, got {type(self.returns).__name__}"
            )
        metadata = _EMPTY if self.metadata is None else self.metadata
        if not isinstance(metadata, Mapping):
            raise CatalogError(f"{api}: 'metadata' must be a mapping or None, got {type(metadata).__name__}")
        if self.parameters is not _DEFAULT_PARAMETERS:
            object.__setattr__(self, "parameters", _freeze(self.parameters, f"{api}: 'parameters'"))
        if self.returns is not None:
            object.__setattr__(self, "returns", _freeze(self.returns, f"{api}: 'returns'"))
        object.__setattr__(self, "metadata", _freeze(metadata, f"{api}: 'metadata'") if metadata else _EMPTY)

    @property
    def tool_key(self) -> str:
        """Key of the parent tool: ``category/tool`` (tool names repeat across categories), or the API id
        when the API has no parent tool (a flat catalog: every API is its own tool)."""
        if self.tool is None:
            return self.id
        return f"{self.category}/{self.tool}" if self.category else self.tool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the normalized JSONL format (``metadata`` written as ``extra``)."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "tool": self.tool,
            "tool_description": self.tool_description,
            "category": self.category,
            "parameters": thaw(self.parameters),
            "returns": thaw(self.returns),
            "extra": thaw(self.metadata),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolSpec) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"ToolSpec(id={self.id!r}, tool={self.tool!r}, category={self.category!r})"


@dataclass(frozen=True, slots=True)
class ScoredTool:
    """A tool in a ranking: its final score, its 1-based rank and each stage's score.

    ``stage_scores`` maps a stage name (``"dense"``, ``"bm25"``, ``"rerank"``, ...) to the score that
    stage gave, so a later stage, or a user asking "why this tool?", can see what happened.
    """

    tool: ToolSpec
    score: float
    rank: int
    stage_scores: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage_scores", MappingProxyType(dict(self.stage_scores)))

    @property
    def id(self) -> str:
        return self.tool.id

    def with_stage(self, stage: str, score: float, *, final: bool = True, rank: int | None = None) -> ScoredTool:
        """Copy with ``stage``'s score recorded (and made the final score when ``final``), at ``rank`` if given
        (a stage that reorders then needs no :func:`renumber`)."""
        scores = dict(self.stage_scores)
        scores[stage] = float(score)
        return ScoredTool(self.tool, float(score) if final else self.score, self.rank if rank is None else rank, scores)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.tool.id,
            "name": self.tool.name,
            "tool": self.tool.tool,
            "category": self.tool.category,
            "score": self.score,
            "rank": self.rank,
            "stage_scores": dict(self.stage_scores),
        }


def _short(value: Any) -> str:
    """A bounded repr for error messages (never fails, never megabytes long)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past Python's 4,300-digit str limit: name the type instead
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def renumber(items: Sequence[ScoredTool]) -> list[ScoredTool]:
    """Renumber ranks 1..n in the given order (stages reorder, then call this); a new list, in which a record
    already at its rank is kept as it is (records are immutable)."""
    return [s if s.rank == i else ScoredTool(s.tool, s.score, i, s.stage_scores) for i, s in enumerate(items, start=1)]


def rerank(items: Sequence[ScoredTool]) -> list[ScoredTool]:
    """Deprecated name of :func:`renumber` (it only renumbers; :meth:`Engine.rerank` runs stages)."""
    warnings.warn("toolrerank_plugins.records.rerank() is deprecated; use renumber()", DeprecationWarning, stacklevel=2)
    return renumber(items)


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    """A benchmark query with its relevant API ids (and gold call order where known)."""

    id: str
    query: str
    relevant: tuple[str, ...]
    split: str | None = None
    group: str | None = None
    calls: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Edge:
    """A dependency: ``target`` depends on ``source`` (``source`` is called first / feeds ``target``)."""

    source: str
    target: str
    type: str = "data_flow"
    origin: str = "labelled"
    weight: float = 1.0
