"""The normalized JSONL format (``tools.jsonl``, ``queries.jsonl``, ``edges.jsonl``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolrerank_plugins.catalog import Catalog, validate_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import Edge, LabelledQuery, ToolSpec


def _iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh = path.open("r", encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot open ({exc})") from exc
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CatalogError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
            if not isinstance(obj, dict):
                raise CatalogError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def spec_from_dict(obj: dict[str, Any], where: str) -> ToolSpec:
    """Build a :class:`ToolSpec` from one normalized-format record (``extra`` or ``metadata``)."""
    if "id" not in obj or not isinstance(obj["id"], str) or not obj["id"].strip():
        raise CatalogError(f"{where}: missing or empty 'id'")
    if not isinstance(obj.get("name"), str) or not obj["name"].strip():
        raise CatalogError(f"{where}: API {obj['id']!r} has a missing or empty 'name'")
    params = obj.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}, "required": []}
    desc = obj.get("description")
    return ToolSpec(
        id=obj["id"],
        name=obj["name"],
        description="" if desc is None else desc,
        tool=obj.get("tool"),
        tool_description=obj.get("tool_description"),
        category=obj.get("category"),
        parameters=params,
        returns=obj.get("returns"),
        metadata=obj.get("extra") or obj.get("metadata") or {},
    )


def load_tools_jsonl(path: str | Path) -> list[ToolSpec]:
    """Read a ``tools.jsonl`` file; errors name the file and line."""
    path = Path(path)
    specs: list[ToolSpec] = []
    seen: dict[str, int] = {}
    for lineno, obj in _iter_json_lines(path):
        where = f"{path}:{lineno}"
        spec = spec_from_dict(obj, where)
        validate_spec(spec, where)
        if spec.id in seen:
            raise CatalogError(f"{where}: duplicate API id {spec.id!r} (first on line {seen[spec.id]})")
        seen[spec.id] = lineno
        specs.append(spec)
    return specs


def write_tools_jsonl(specs: Iterable[ToolSpec], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as fh:
        for spec in specs:
            fh.write(json.dumps(spec.to_dict(), ensure_ascii=False) + "\n")


def load_edges(path: str | Path) -> list[Edge]:
    path = Path(path)
    out = []
    for lineno, obj in _iter_json_lines(path):
        try:
            out.append(
                Edge(
                    source=str(obj["source"]),
                    target=str(obj["target"]),
                    type=str(obj.get("type", "data_flow")),
                    origin=str(obj.get("origin", "labelled")),
                    weight=float(obj.get("weight", 1.0)),
                )
            )
        except KeyError as exc:
            raise CatalogError(f"{path}:{lineno}: edge is missing {exc.args[0]!r}") from exc
    return out


def write_edges(edges: Iterable[Edge], path: str | Path) -> None:
    """Write edges as JSONL in the format :func:`load_edges` reads."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for e in edges:
            record = {"source": e.source, "target": e.target, "type": e.type, "origin": e.origin, "weight": e.weight}
            fh.write(json.dumps(record) + "\n")


def load_catalog(path: str | Path, *, with_edges: bool = True) -> Catalog:
    """Load a catalog from a directory (``tools.jsonl`` [+ ``edges.jsonl``]) or a single JSONL file.

    Example:
        >>> from toolrerank_plugins.catalog import default_catalog_path
        >>> cat = load_catalog(default_catalog_path())
        >>> len(cat) > 200
        True
    """
    path = Path(path)
    edges_file: Path | None = None  # a single JSONL file is just the tools
    if path.is_dir():
        tools_file = path / "tools.jsonl"
        if not tools_file.exists():
            raise CatalogError(f"{path}: directory has no tools.jsonl")
        edges_file = path / "edges.jsonl"
    elif path.exists():
        tools_file = path
    else:
        raise CatalogError(f"{path}: no such catalog file or directory")
    specs = load_tools_jsonl(tools_file)
    if not specs:
        raise CatalogError(f"{tools_file}: the catalog is empty (no API records)")
    edges = load_edges(edges_file) if with_edges and edges_file is not None and edges_file.exists() else []
    return Catalog(specs, edges=edges, source=str(tools_file))


def load_queries(path: str | Path, *, split: str | Iterable[str] | None = None) -> list[LabelledQuery]:
    """Read ``queries.jsonl`` (a file or a directory holding one), optionally filtered by split."""
    path = Path(path)
    if path.is_dir():
        path = path / "queries.jsonl"
    splits = None if split is None else ({split} if isinstance(split, str) else set(split))
    out = []
    for lineno, obj in _iter_json_lines(path):
        where = f"{path}:{lineno}"
        if not isinstance(obj.get("query"), str):
            raise CatalogError(f"{where}: query record has no 'query' string")
        rel = obj.get("relevant")
        if not isinstance(rel, list) or not all(isinstance(r, str) for r in rel):
            raise CatalogError(f"{where}: 'relevant' must be a list of API ids")
        if splits is not None and obj.get("split") not in splits:
            continue
        calls = obj.get("calls")
        out.append(
            LabelledQuery(
                id=str(obj.get("id", lineno)),
                query=obj["query"],
                relevant=tuple(rel),
                split=obj.get("split"),
                group=obj.get("group"),
                calls=None if calls is None else tuple(calls),
            )
        )
    return out
