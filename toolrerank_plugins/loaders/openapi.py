"""OpenAPI 3 specs: one API per operation, the service (``info.title``) as the parent tool."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _resolve(node: Any, root: Mapping[str, Any], depth: int = 0) -> Any:
    """Inline local ``#/...`` $refs (bounded depth: recursive schemas stop as ``{"type": "object"}``)."""
    if depth > 8:
        return {"type": "object"}
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise CatalogError(f"OpenAPI: unresolvable $ref {ref!r}")
                target = target[part]
            return _resolve(target, root, depth + 1)
        return {k: _resolve(v, root, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, root, depth + 1) for v in node]
    return node


def from_openapi(spec: Mapping[str, Any] | str | Path, *, category: str | None = None) -> Catalog:
    """Build a catalog from an OpenAPI 3 document (a mapping, or a JSON/YAML file path).

    id = ``"<title>:<METHOD> <path>"``; parameters = path-level + operation parameters (``in`` kept per
    property) + JSON request-body properties; returns = the first 2xx JSON response schema.
    """
    source = "<openapi>"
    if isinstance(spec, (str, Path)):
        source = str(spec)
        text = Path(spec).read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            try:
                import yaml
            except ImportError as exc:
                raise CatalogError(f"{source}: not JSON, and PyYAML is not installed to read YAML") from exc
            doc = yaml.safe_load(text)
    else:
        doc = spec
    if not isinstance(doc, Mapping) or not str(doc.get("openapi", "")).startswith("3"):
        raise CatalogError(f"{source}: not an OpenAPI 3 document (missing 'openapi: 3.x')")
    info = doc.get("info") or {}
    title = str(info.get("title") or "api")
    paths = doc.get("paths")
    if not isinstance(paths, Mapping):
        raise CatalogError(f"{source}: OpenAPI document has no 'paths' mapping")
    specs = []
    for path, item in paths.items():
        if not isinstance(item, Mapping):
            continue
        shared = list(item.get("parameters") or [])
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, Mapping):
                continue
            props: dict[str, Any] = {}
            required: list[str] = []
            for p in shared + list(op.get("parameters") or []):
                p = _resolve(p, doc)
                if not isinstance(p, Mapping) or "name" not in p:
                    continue
                schema = dict(p.get("schema") or {})
                if p.get("description"):
                    schema["description"] = p["description"]
                schema["in"] = p.get("in")
                props[p["name"]] = schema
                if p.get("required"):
                    required.append(p["name"])
            body = _resolve(op.get("requestBody") or {}, doc)
            body_schema = ((body.get("content") or {}).get("application/json") or {}).get("schema") or {}
            for name, prop in (body_schema.get("properties") or {}).items():
                props[name] = {**prop, "in": "body"}
            required += [r for r in body_schema.get("required") or [] if r in props]
            returns = None
            for code, resp in (op.get("responses") or {}).items():
                if str(code).startswith("2"):
                    resp = _resolve(resp, doc)
                    returns = ((resp.get("content") or {}).get("application/json") or {}).get("schema")
                    break
            name = f"{method.upper()} {path}"
            specs.append(
                ToolSpec(
                    id=f"{title}:{name}",
                    name=op.get("operationId") or name,
                    description=op.get("description") or op.get("summary") or "",
                    tool=title,
                    tool_description=info.get("description"),
                    category=category,
                    parameters={"type": "object", "properties": props, "required": sorted(set(required))},
                    returns=returns if isinstance(returns, Mapping) else None,
                    metadata={"format": "openapi", "method": method.upper(), "path": path},
                )
            )
    return Catalog(specs, source=source)
