"""Frozen records shared by every stage: tool specs, scored results, labelled queries, edges."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze(value: Any) -> Any:
    """Deep read-only view of JSON-like data, so a frozen record cannot be changed through its fields."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


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


@dataclass(frozen=True, eq=False, slots=True)
class ToolSpec:
    """One retrievable API.

    The hierarchy is category -> tool -> API. ``tool`` is the parent service; an API without one is
    its own tool (see :attr:`tool_key`).

    Example:
        >>> spec = ToolSpec(id="Weather/SkyCast/forecast", name="forecast", tool="SkyCast")
        >>> spec.tool_key
        'SkyCast'
    """

    id: str
    name: str
    description: str = ""
    tool: str | None = None
    tool_description: str | None = None
    category: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=lambda: _freeze({"type": "object", "properties": {}}))
    returns: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", _freeze(self.parameters))
        object.__setattr__(self, "returns", None if self.returns is None else _freeze(self.returns))
        object.__setattr__(self, "metadata", _freeze(self.metadata))

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

    def with_stage(self, stage: str, score: float, *, final: bool = True) -> ScoredTool:
        """Copy with ``stage``'s score recorded (and made the final score when ``final``)."""
        scores = dict(self.stage_scores)
        scores[stage] = float(score)
        return ScoredTool(self.tool, float(score) if final else self.score, self.rank, scores)

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


def renumber(items: Sequence[ScoredTool]) -> list[ScoredTool]:
    """Renumber ranks 1..n in the given order (stages reorder, then call this)."""
    return [ScoredTool(s.tool, s.score, i, s.stage_scores) for i, s in enumerate(items, start=1)]


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
