"""The tool catalog: APIs with their hierarchy (category -> tool -> API), dependencies and "seen" marks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import Edge, ToolSpec

_JSON_TYPES = {"object", "string", "integer", "number", "boolean", "array", "null"}


def validate_parameters(params: Any, where: str) -> None:
    """Raise :class:`CatalogError` unless ``params`` is a JSON Schema *object* schema.

    Property types outside JSON Schema's names are accepted (real catalogs use ``ENUM``, ``DATE`` ...);
    the structure must hold: ``type: object``, ``properties`` a mapping of mappings, ``required`` a list
    of strings.
    """
    if not isinstance(params, Mapping):
        raise CatalogError(f"{where}: 'parameters' must be a JSON Schema object, got {type(params).__name__}")
    if params.get("type", "object") != "object":
        raise CatalogError(f"{where}: 'parameters' must have type 'object', got {params.get('type')!r}")
    props = params.get("properties", {})
    if not isinstance(props, Mapping):
        raise CatalogError(f"{where}: 'parameters.properties' must be a mapping, got {type(props).__name__}")
    for name, prop in props.items():
        if not isinstance(prop, Mapping):
            raise CatalogError(f"{where}: parameter {name!r} must be a JSON Schema mapping, got {type(prop).__name__}")
    required = params.get("required", [])
    if not isinstance(required, (list, tuple)) or not all(isinstance(r, str) for r in required):
        raise CatalogError(f"{where}: 'parameters.required' must be a list of parameter names")


def validate_spec(spec: ToolSpec, where: str) -> None:
    if not isinstance(spec.id, str) or not spec.id.strip():
        raise CatalogError(f"{where}: missing or empty 'id'")
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise CatalogError(f"{where}: API {spec.id!r} has a missing or empty 'name'")
    if not isinstance(spec.description, str):
        raise CatalogError(f"{where}: API {spec.id!r}: 'description' must be a string")
    validate_parameters(spec.parameters, f"{where}: API {spec.id!r}")
    if spec.returns is not None and not isinstance(spec.returns, Mapping):
        raise CatalogError(f"{where}: API {spec.id!r}: 'returns' must be a JSON Schema mapping or null")


class Catalog:
    """An ordered, id-unique collection of :class:`ToolSpec` with its hierarchy.

    Example:
        >>> from toolrerank_plugins.records import ToolSpec
        >>> cat = Catalog([ToolSpec(id="a", name="login", tool="Auth"), ToolSpec(id="b", name="me", tool="Auth")])
        >>> [t.id for t in cat.apis_of_tool("Auth")]
        ['a', 'b']
    """

    def __init__(
        self,
        tools: Iterable[ToolSpec] = (),
        *,
        edges: Iterable[Edge] = (),
        seen_tools: Iterable[str] = (),
        source: str = "<memory>",
    ) -> None:
        self._by_id: dict[str, ToolSpec] = {}
        self._edges: list[Edge] = []
        self._seen: set[str] = set()
        self.source = source
        for i, spec in enumerate(tools):
            self._add_one(spec, f"{source}: entry {i + 1}")
        for edge in edges:
            self.add_edge(edge)
        self.mark_seen(seen_tools)

    # -- collection protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._by_id.values())

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def __getitem__(self, tool_id: str) -> ToolSpec:
        try:
            return self._by_id[tool_id]
        except KeyError:
            raise KeyError(f"no API with id {tool_id!r} in catalog {self.source}") from None

    def get(self, tool_id: str) -> ToolSpec | None:
        return self._by_id.get(tool_id)

    @property
    def ids(self) -> list[str]:
        return list(self._by_id)

    # -- hierarchy ------------------------------------------------------------------------------
    def tools(self) -> dict[str, list[ToolSpec]]:
        """tool key -> its APIs, in catalog order."""
        out: dict[str, list[ToolSpec]] = defaultdict(list)
        for spec in self._by_id.values():
            out[spec.tool_key].append(spec)
        return dict(out)

    def apis_of_tool(self, tool_key: str) -> list[ToolSpec]:
        """All APIs whose :attr:`ToolSpec.tool_key` (or bare ``tool`` name) equals ``tool_key``."""
        return [s for s in self._by_id.values() if s.tool_key == tool_key or s.tool == tool_key]

    def categories(self) -> dict[str, list[str]]:
        """category -> tool keys in it (``None`` category reported as ``""``)."""
        out: dict[str, list[str]] = defaultdict(list)
        for spec in self._by_id.values():
            keys = out[spec.category or ""]
            if spec.tool_key not in keys:
                keys.append(spec.tool_key)
        return dict(out)

    @property
    def has_hierarchy(self) -> bool:
        """False when every API is its own tool (flat catalogs such as Seal-Tools)."""
        return any(s.tool is not None for s in self._by_id.values())

    # -- seen tools (ToolRerank's adaptive truncation) -------------------------------------------
    def mark_seen(self, tool_keys: Iterable[str]) -> None:
        """Mark tools as seen in training data (by tool key)."""
        self._seen.update(tool_keys)

    def is_seen(self, spec: ToolSpec | str) -> bool:
        key = spec.tool_key if isinstance(spec, ToolSpec) else self[spec].tool_key
        return key in self._seen

    @property
    def seen_tools(self) -> frozenset[str]:
        return frozenset(self._seen)

    # -- dependencies ---------------------------------------------------------------------------
    def add_edge(self, edge: Edge) -> None:
        for end in (edge.source, edge.target):
            if end not in self._by_id:
                raise CatalogError(f"{self.source}: edge {edge.source!r} -> {edge.target!r} names unknown API {end!r}")
        self._edges.append(edge)

    @property
    def edges(self) -> list[Edge]:
        return list(self._edges)

    # -- updates --------------------------------------------------------------------------------
    def _add_one(self, spec: ToolSpec, where: str) -> None:
        if not isinstance(spec, ToolSpec):
            raise CatalogError(f"{where}: expected a ToolSpec, got {type(spec).__name__}")
        validate_spec(spec, where)
        if spec.id in self._by_id:
            raise CatalogError(f"{where}: duplicate API id {spec.id!r}")
        self._by_id[spec.id] = spec

    def add(self, specs: Iterable[ToolSpec]) -> list[ToolSpec]:
        """Add new APIs (ids must be new). All are validated before any is added."""
        specs = list(specs)
        seen: set[str] = set()
        for i, spec in enumerate(specs):
            validate_spec(spec, f"add(): entry {i + 1}")
            if spec.id in self._by_id or spec.id in seen:
                raise CatalogError(f"add(): entry {i + 1}: duplicate API id {spec.id!r}; use update() to replace")
            seen.add(spec.id)
        for spec in specs:
            self._by_id[spec.id] = spec
        return specs

    def update(self, specs: Iterable[ToolSpec]) -> list[ToolSpec]:
        """Replace existing APIs (by id), keeping their position."""
        specs = list(specs)
        for i, spec in enumerate(specs):
            validate_spec(spec, f"update(): entry {i + 1}")
            if spec.id not in self._by_id:
                raise CatalogError(f"update(): entry {i + 1}: unknown API id {spec.id!r}; use add() for new APIs")
        for spec in specs:
            self._by_id[spec.id] = spec
        return specs

    def remove(self, tool_ids: Iterable[str]) -> list[str]:
        """Remove APIs by id (and every edge touching them)."""
        ids = list(tool_ids)
        missing = [t for t in ids if t not in self._by_id]
        if missing:
            raise CatalogError(f"remove(): unknown API id(s) {missing[:5]!r}")
        gone = set(ids)
        for t in ids:
            del self._by_id[t]
        self._edges = [e for e in self._edges if e.source not in gone and e.target not in gone]
        return ids

    def copy(self) -> Catalog:
        return Catalog(self._by_id.values(), edges=self._edges, seen_tools=self._seen, source=self.source)

    def __repr__(self) -> str:
        return f"Catalog({len(self)} APIs, {len(self.tools())} tools, source={self.source!r})"


def default_catalog_path() -> Path:
    """Folder of the catalog bundled with the package (``tools.jsonl``, ``queries.jsonl``, ``edges.jsonl``).

    Fictional services written for this project (Apache-2.0): the data of ``toolrerank demo``, the docs'
    examples and a small evaluation set. Load it with :func:`toolrerank_plugins.loaders.load_catalog`.

    Example:
        >>> from toolrerank_plugins.loaders import load_catalog
        >>> len(load_catalog(default_catalog_path())) > 200
        True
    """
    return Path(__file__).resolve().parent / "data" / "default_catalog"
