"""The normalized JSONL format (``tools.jsonl``, ``queries.jsonl``, ``edges.jsonl``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolrerank_plugins._atomic import atomic_open
from toolrerank_plugins.catalog import Catalog, build_spec, validate_spec
from toolrerank_plugins.errors import CatalogError, ToolRerankError
from toolrerank_plugins.loaders._read import parse_json, undecodable
from toolrerank_plugins.records import Edge, LabelledQuery, ToolSpec, check_text, is_finite_number


def _iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        # surrogateescape: a byte that is not UTF-8 is reported with its line (see undecodable) instead of
        # a UnicodeDecodeError from somewhere in the file. utf-8-sig: a leading byte-order mark (Notepad and
        # PowerShell write one) is dropped rather than making line 1 "not valid JSON".
        fh = path.open("r", encoding="utf-8-sig", errors="surrogateescape")
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise CatalogError(f"{str(path)!r}: cannot open ({exc})") from exc
    with fh:
        for lineno, line in enumerate(fh, start=1):
            problem = undecodable(line)
            if problem is not None:
                raise CatalogError(f"{path}:{lineno}: {problem}")
            if not line.strip():
                continue
            obj = parse_json(line, f"{path}:{lineno}")
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
    return build_spec(
        where,
        id=obj["id"],
        name=obj["name"],
        description="" if desc is None else desc,
        tool=obj.get("tool"),
        tool_description=obj.get("tool_description"),
        category=obj.get("category"),
        parameters=params,
        returns=obj.get("returns"),
        metadata=obj.get("extra") or obj.get("metadata") or None,
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
    """Write specs as ``tools.jsonl`` (atomically; an OS failure is a ``SaveError`` naming the file)."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for spec in specs:
            fh.write(json.dumps(spec.to_dict(), ensure_ascii=False) + "\n")


def load_edges(path: str | Path) -> list[Edge]:
    path = Path(path)
    out = []
    for lineno, obj in _iter_json_lines(path):
        where = f"{path}:{lineno}"
        fields: dict[str, Any] = {"source": obj.get("source"), "target": obj.get("target")}
        fields["type"] = obj.get("type", "data_flow")
        fields["origin"] = obj.get("origin", "labelled")
        for key, value in fields.items():
            if key in ("source", "target") and key not in obj:
                raise CatalogError(f"{where}: edge is missing {key!r}")
            if not isinstance(value, str):
                raise CatalogError(f"{where}: edge {key!r} must be a string, got {type(value).__name__}")
            check_text(value, f"{where}: edge {key!r}")
        weight = obj.get("weight", 1.0)
        if not is_finite_number(weight):
            raise CatalogError(f"{where}: edge 'weight' must be a number, got {weight!r:.40}")
        out.append(Edge(**fields, weight=float(weight)))
    return out


def write_edges(edges: Iterable[Edge], path: str | Path) -> None:
    """Write edges as JSONL in the format :func:`load_edges` reads (atomically, like :func:`write_tools_jsonl`)."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for e in edges:
            record = {"source": e.source, "target": e.target, "type": e.type, "origin": e.origin, "weight": e.weight}
            fh.write(json.dumps(record, allow_nan=False) + "\n")


def _other_format(path: Path) -> tuple[str, str] | None:
    """``(format, what was found)`` when a file the JSONL loader refused holds another catalog format."""
    from toolrerank_plugins.loaders.files import _sniff  # files.py builds on this module

    try:
        sniffed = _sniff(path)
    except ToolRerankError:
        return None
    if sniffed.format is None or sniffed.format == "jsonl":
        return None
    return sniffed.format, sniffed.found


def load_catalog(path: str | Path, *, with_edges: bool = True) -> Catalog:
    """Load a catalog from a directory (``tools.jsonl`` [+ ``edges.jsonl``]) or a single JSONL file.

    Other formats (OpenAPI, MCP, OpenAI tool lists) load with
    :func:`~toolrerank_plugins.loaders.load_catalog_file`, which detects them; given one, this says so.

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
    try:
        specs = load_tools_jsonl(tools_file)
    except CatalogError as exc:
        other = _other_format(tools_file)
        if other is None:
            raise
        raise CatalogError(
            f"{tools_file}: expected a JSONL catalog (one API record per line), found {other[1]}; load it with "
            f"load_catalog_file(path) (or toolrerank ... --format {other[0]}), which reads it as {other[0]!r}"
        ) from exc
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
        check_text(obj["query"], f"{where}: 'query'")
        rel = obj.get("relevant")
        if not isinstance(rel, list) or not all(isinstance(r, str) for r in rel):
            raise CatalogError(f"{where}: 'relevant' must be a list of API ids")
        calls = obj.get("calls")
        if calls is not None and (not isinstance(calls, list) or not all(isinstance(c, str) for c in calls)):
            raise CatalogError(f"{where}: 'calls' must be a list of API ids or null")
        for key in ("split", "group"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise CatalogError(f"{where}: {key!r} must be a string or null, got {type(obj[key]).__name__}")
        qid = obj.get("id", lineno)
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or (isinstance(qid, int) and qid.bit_length() > 64):
            raise CatalogError(f"{where}: 'id' must be a string or an integer, got {type(qid).__name__}")
        if splits is not None and obj.get("split") not in splits:
            continue
        out.append(
            LabelledQuery(
                id=str(qid),
                query=obj["query"],
                relevant=tuple(rel),
                split=obj.get("split"),
                group=obj.get("group"),
                calls=None if calls is None else tuple(calls),
            )
        )
    return out
