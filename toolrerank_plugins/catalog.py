"""The tool catalog: APIs with their hierarchy (category -> tool -> API), dependencies and "seen" marks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import Edge, ToolSpec, check_text, is_finite_number

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
    """Raise :class:`CatalogError` (prefixed with ``where``) unless ``spec`` may join a catalog: a
    non-empty ``id`` and ``name`` and an object-schema ``parameters`` (field types and JSON-ness are
    checked when the :class:`ToolSpec` is created)."""
    if not isinstance(spec.id, str) or not spec.id.strip():
        raise CatalogError(f"{where}: missing or empty 'id'")
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise CatalogError(f"{where}: API {spec.id!r} has a missing or empty 'name'")
    if not isinstance(spec.description, str):
        raise CatalogError(f"{where}: API {spec.id!r}: 'description' must be a string")
    validate_parameters(spec.parameters, f"{where}: API {spec.id!r}")
    if spec.returns is not None and not isinstance(spec.returns, Mapping):
        raise CatalogError(f"{where}: API {spec.id!r}: 'returns' must be a JSON Schema mapping or null")


def build_spec(where: str, **fields: Any) -> ToolSpec:
    """A :class:`ToolSpec` from a loader's fields, checked as a catalog entry; every error is a
    :class:`CatalogError` that starts with ``where`` (the file and line, or the entry, it came from)."""
    try:
        spec = ToolSpec(**fields)
    except CatalogError as exc:
        raise CatalogError(f"{where}: {exc}") from exc
    validate_spec(spec, where)
    return spec


def _iterable(value: Any, argument: str, what: str) -> Iterable[Any]:
    """``value`` if it can be iterated as a collection of ``what``; a string or mapping is a TypeError."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"Catalog: {argument!r} must be an iterable of {what}, got {type(value).__name__}")
    return value


def _batch(items: Iterable[Any], method: str, what: str) -> list[Any]:
    """``items`` as a list; a lone string or ToolSpec (a common slip) is a TypeError, not a batch."""
    if isinstance(items, (str, ToolSpec)):
        raise TypeError(
            f"{method}() takes an iterable of {what}, not a single {type(items).__name__}; wrap it in a list"
        )
    try:
        it = iter(items)
    except TypeError:
        raise TypeError(f"{method}() takes an iterable of {what}, got {type(items).__name__}") from None
    return list(it)


def _check_spec(spec: Any, where: str) -> None:
    if not isinstance(spec, ToolSpec):
        raise CatalogError(f"{where}: expected a ToolSpec, got {type(spec).__name__}")
    validate_spec(spec, where)


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
        if not isinstance(source, str):
            raise TypeError(
                f"Catalog: 'source' must be a string naming where the catalog came from, got {type(source).__name__}"
            )
        self._by_id: dict[str, ToolSpec] = {}
        self._edges: list[Edge] = []
        self._seen: set[str] = set()
        self.source = source
        for i, spec in enumerate(_iterable(tools, "tools", "ToolSpec objects")):
            self._add_one(spec, f"{source}: entry {i + 1}")
        for edge in _iterable(edges, "edges", "Edge objects"):
            self.add_edge(edge)
        self.mark_seen(_iterable(seen_tools, "seen_tools", "tool keys (strings)"))

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
        """Mark tools as seen in training data (by tool key).

        Raises:
            TypeError: ``tool_keys`` is a single string or holds a non-string.
        """
        keys = list(_iterable(tool_keys, "seen_tools", "tool keys (strings)"))
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(f"Catalog: 'seen_tools' must hold tool keys (strings), got {type(key).__name__}")
        self._seen.update(keys)

    def is_seen(self, spec: ToolSpec | str) -> bool:
        key = spec.tool_key if isinstance(spec, ToolSpec) else self[spec].tool_key
        return key in self._seen

    @property
    def seen_tools(self) -> frozenset[str]:
        return frozenset(self._seen)

    # -- dependencies ---------------------------------------------------------------------------
    def add_edge(self, edge: Edge) -> None:
        """Add a dependency between two APIs of this catalog."""
        if not isinstance(edge, Edge):
            raise CatalogError(f"{self.source}: edge must be an Edge, got {type(edge).__name__}")
        for name in ("source", "target", "type", "origin"):
            if not isinstance(getattr(edge, name), str):
                raise CatalogError(
                    f"{self.source}: edge {name} must be a string, got {type(getattr(edge, name)).__name__}"
                )
            check_text(getattr(edge, name), f"{self.source}: edge {name}")  # else the saved engine won't load
        if not is_finite_number(edge.weight):
            raise CatalogError(
                f"{self.source}: edge {edge.source!r} -> {edge.target!r}: weight must be a finite number"
            )
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
        """Add new APIs (ids must be new). All are validated before any is added.

        Raises:
            CatalogError: an entry is not a valid :class:`ToolSpec` or its id is already taken (nothing
                is added then).
            TypeError: ``specs`` is a single ToolSpec or not an iterable.
        """
        specs = _batch(specs, "add", "ToolSpec objects")
        seen: set[str] = set()
        for i, spec in enumerate(specs):
            _check_spec(spec, f"add(): entry {i + 1}")
            if spec.id in self._by_id or spec.id in seen:
                raise CatalogError(f"add(): entry {i + 1}: duplicate API id {spec.id!r}; use update() to replace")
            seen.add(spec.id)
        for spec in specs:
            self._by_id[spec.id] = spec
        return specs

    def update(self, specs: Iterable[ToolSpec]) -> list[ToolSpec]:
        """Replace existing APIs (by id), keeping their position. All are validated before any is replaced.

        Raises:
            CatalogError: an entry is not a valid :class:`ToolSpec`, its id is unknown, or an id repeats
                (nothing is replaced then).
            TypeError: ``specs`` is a single ToolSpec or not an iterable.
        """
        specs = _batch(specs, "update", "ToolSpec objects")
        seen: set[str] = set()
        for i, spec in enumerate(specs):
            _check_spec(spec, f"update(): entry {i + 1}")
            if spec.id not in self._by_id:
                raise CatalogError(f"update(): entry {i + 1}: unknown API id {spec.id!r}; use add() for new APIs")
            if spec.id in seen:
                raise CatalogError(f"update(): entry {i + 1}: API id {spec.id!r} is given twice")
            seen.add(spec.id)
        for spec in specs:
            self._by_id[spec.id] = spec
        return specs

    def remove(self, tool_ids: Iterable[str]) -> list[str]:
        """Remove APIs by id (and every edge touching them). All ids are checked before any is removed.

        Raises:
            CatalogError: an id is unknown or given twice (nothing is removed then).
            TypeError: ``tool_ids`` is a single string or not an iterable.
        """
        ids = _batch(tool_ids, "remove", "API ids")
        missing = [t for t in ids if not isinstance(t, str) or t not in self._by_id]
        if missing:
            raise CatalogError(f"remove(): unknown API id(s) {missing[:5]!r}")
        if len(set(ids)) != len(ids):
            twice = sorted({t for t in ids if ids.count(t) > 1})
            raise CatalogError(f"remove(): API id(s) given twice: {twice[:5]!r}")
        gone = set(ids)
        for t in ids:
            del self._by_id[t]
        self._edges = [e for e in self._edges if e.source not in gone and e.target not in gone]
        return ids

    def copy(self) -> Catalog:
        """An independent copy; changing one never changes the other.

        The specs are frozen and shared, and were validated when added, so copying is a dictionary copy
        (the engine copies its catalog on every ``add`` / ``update`` / ``remove``).
        """
        new = Catalog(source=self.source)
        new._by_id = dict(self._by_id)
        new._edges = list(self._edges)
        new._seen = set(self._seen)
        return new

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
