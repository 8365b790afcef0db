"""OpenAPI 3 specs: one API per operation, the service (``info.title``) as the parent tool."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.loaders._read import read_text
from toolrerank_plugins.records import MAX_JSON_VALUES, ToolSpec

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _kind(value: Any) -> str:
    return type(value).__name__


class _Resolver:
    """Inlines local ``#/...`` $refs (bounded depth: recursive schemas stop as ``{"type": "object"}``).

    Counts what it builds across the whole document: YAML aliases (or a shared dict) can make a small file
    expand to billions of values, which is refused past :data:`~toolrerank_plugins.records.MAX_JSON_VALUES`.
    """

    def __init__(self, root: Mapping[str, Any], source: str) -> None:
        self.root = root
        self.source = source
        self.count = 0

    def __call__(self, node: Any, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_JSON_VALUES:
            raise CatalogError(f"{self.source}: expanding $refs and aliases gives more than {MAX_JSON_VALUES:,} values")
        if depth > 8:
            return {"type": "object"}
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/"):
                target: Any = self.root
                for part in ref[2:].split("/"):
                    part = part.replace("~1", "/").replace("~0", "~")
                    if not isinstance(target, Mapping) or part not in target:
                        raise CatalogError(f"OpenAPI: unresolvable $ref {ref!r}")
                    target = target[part]
                return self(target, depth + 1)
            return {k: self(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [self(v, depth + 1) for v in node]
        return node


def _load_document(path: Path) -> Any:
    """A JSON or YAML file as Python data; every failure is a :class:`CatalogError` naming the file."""
    source = str(path)
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass  # not JSON: try YAML below
    except RecursionError as exc:
        raise CatalogError(f"{source}: not valid JSON here (nested too deeply for Python's parser)") from exc
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise CatalogError(f"{source}: not valid JSON here ({exc})") from exc
    try:
        import yaml
    except ImportError as exc:
        raise CatalogError(f"{source}: not JSON, and PyYAML is not installed to read YAML") from exc

    class _Loader(yaml.SafeLoader):
        """Safe YAML, but timestamps stay strings (JSON has no dates; ``2024-01-01`` examples are common)."""

    _Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not valid JSON or YAML ({' '.join(str(exc).split())[:300]})") from exc
    except RecursionError as exc:
        raise CatalogError(f"{source}: YAML nested too deeply for Python's parser") from exc
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise CatalogError(f"{source}: YAML value cannot be read ({exc})") from exc


def _scalar_text(value: Any) -> str | None:
    """``str(value)`` for a string or a (reasonably sized) number, else ``None``."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) or (isinstance(value, int) and value.bit_length() <= 64):
        return str(value)
    return None


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    """``value`` (``None`` or empty: ``{}``) if it is a mapping, else a CatalogError naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: {what} must be a mapping, got {_kind(value)}")
    return value


def _list(value: Any, where: str, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CatalogError(f"{where}: {what} must be a list, got {_kind(value)}")
    return value


def _optional_str(value: Any, where: str, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise CatalogError(f"{where}: {what} must be a string, got {_kind(value)}")
    return value


def _parameter(p: Any, where: str, label: str) -> tuple[str, dict[str, Any], bool]:
    """One resolved Parameter Object: its name, its property schema (``in`` kept) and whether required."""
    if not isinstance(p, Mapping):
        raise CatalogError(f"{where}: {label} must be a mapping, got {_kind(p)}")
    name = p.get("name")
    if not isinstance(name, str) or not name:
        raise CatalogError(f"{where}: {label}: 'name' must be a non-empty string, got {_kind(name)}")
    schema = dict(_mapping(p.get("schema"), where, f"parameter {name!r}: 'schema'"))
    description = _optional_str(p.get("description"), where, f"parameter {name!r}: 'description'")
    if description:
        schema["description"] = description
    schema["in"] = p.get("in")
    required = p.get("required", False)
    if not isinstance(required, bool):
        raise CatalogError(f"{where}: parameter {name!r}: 'required' must be true or false, got {_kind(required)}")
    return name, schema, required


def _operation(
    resolve: _Resolver,
    path: str,
    method: str,
    op: Mapping[str, Any],
    shared: Any,
    where: str,
    *,
    title: str,
    tool_description: str | None,
    category: str | None,
) -> ToolSpec:
    props: dict[str, Any] = {}
    required: list[str] = []
    params = [(f"path parameter {i + 1}", p) for i, p in enumerate(_list(shared, where, "path-level 'parameters'"))]
    params += [(f"parameter {i + 1}", p) for i, p in enumerate(_list(op.get("parameters"), where, "'parameters'"))]
    for label, p in params:
        name, schema, is_required = _parameter(resolve(p), where, label)
        props[name] = schema
        if is_required:
            required.append(name)

    body = _mapping(resolve(op.get("requestBody")), where, "'requestBody'")
    content = _mapping(body.get("content"), where, "'requestBody.content'")
    media = _mapping(content.get("application/json"), where, "'requestBody.content.application/json'")
    body_schema = _mapping(media.get("schema"), where, "request body 'schema'")
    for name, prop in _mapping(body_schema.get("properties"), where, "request body 'properties'").items():
        if not isinstance(name, str):
            raise CatalogError(f"{where}: request body property name {name!r:.40} must be a string")
        props[name] = {**_mapping(prop, where, f"request body property {name!r}"), "in": "body"}
    body_required = body_schema.get("required") or []
    if not isinstance(body_required, list) or not all(isinstance(r, str) for r in body_required):
        raise CatalogError(f"{where}: request body 'required' must be a list of strings, got {_kind(body_required)}")
    required += [r for r in body_required if r in props]

    returns = None
    for code, resp in _mapping(op.get("responses"), where, "'responses'").items():
        if (_scalar_text(code) or "").startswith("2"):
            resp = _mapping(resolve(resp), where, f"response {code!r}")
            resp_content = _mapping(resp.get("content"), where, f"response {code!r}: 'content'")
            media = _mapping(resp_content.get("application/json"), where, f"response {code!r}: 'application/json'")
            returns = media.get("schema")
            break

    name = f"{method.upper()} {path}"
    operation_id = _optional_str(op.get("operationId"), where, "'operationId'")
    description = _optional_str(op.get("description"), where, "'description'")
    summary = _optional_str(op.get("summary"), where, "'summary'")
    return build_spec(
        where,
        id=f"{title}:{name}",
        name=operation_id or name,
        description=description or summary or "",
        tool=title,
        tool_description=tool_description,
        category=category,
        parameters={"type": "object", "properties": props, "required": sorted(set(required))},
        returns=returns if isinstance(returns, Mapping) else None,  # a boolean schema (3.1) gives no returns
        metadata={"format": "openapi", "method": method.upper(), "path": path},
    )


def from_openapi(spec: Mapping[str, Any] | str | Path, *, category: str | None = None) -> Catalog:
    """Build a catalog from an OpenAPI 3 document (a mapping, or a JSON/YAML file path).

    id = ``"<title>:<METHOD> <path>"``; parameters = path-level + operation parameters (``in`` kept per
    property) + JSON request-body properties; returns = the first 2xx JSON response schema.

    Raises:
        CatalogError: the file cannot be read or parsed (not UTF-8, not JSON/YAML, nested too deeply), the
            document is not OpenAPI 3, or a part has the wrong shape (``info``, a path item, an operation,
            ``parameters``, a parameter or its ``schema``, ``requestBody``, ``responses`` ...): the message
            names the operation (``"GET /pets"``) and the part.
    """
    source = "<openapi>"
    if isinstance(spec, (str, Path)):
        source = str(spec)
        doc = _load_document(Path(spec))
    else:
        doc = spec
    if not isinstance(doc, Mapping) or not (_scalar_text(doc.get("openapi", "")) or "").startswith("3"):
        raise CatalogError(f"{source}: not an OpenAPI 3 document (missing 'openapi: 3.x')")
    info = _mapping(doc.get("info"), source, "'info'")
    raw_title = info.get("title") or "api"
    title = _scalar_text(raw_title)
    if title is None:
        raise CatalogError(f"{source}: 'info.title' must be a string, got {_kind(raw_title)}")
    tool_description = _optional_str(info.get("description"), source, "'info.description'")
    paths = doc.get("paths")
    if not isinstance(paths, Mapping):
        raise CatalogError(f"{source}: OpenAPI document has no 'paths' mapping")
    resolve = _Resolver(doc, source)
    specs = []
    for path, item in paths.items():
        if not isinstance(path, str):
            raise CatalogError(f"{source}: path {path!r:.40} must be a string")
        if path.startswith("x-"):  # a specification extension, not a path
            continue
        item = _mapping(item, f"{source}: {path}", "path item")
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = f"{source}: {method.upper()} {path}"
            if not isinstance(op, Mapping):
                raise CatalogError(f"{where}: operation must be a mapping, got {_kind(op)}")
            specs.append(
                _operation(
                    resolve,
                    path,
                    method,
                    op,
                    item.get("parameters"),
                    where,
                    title=title,
                    tool_description=tool_description,
                    category=category,
                )
            )
    return Catalog(specs, source=source)
