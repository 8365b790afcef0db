"""Deterministic stand-ins for real tool implementations, so catalog APIs run as tools offline."""

from __future__ import annotations

import hashlib
import inspect
import json
import keyword
from collections.abc import Callable
from typing import Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.loaders.jsonl import load_catalog
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing.catalogs import default_catalog_path, tiny_catalog

_PY_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def demo_catalog() -> Catalog:
    """The bundled default catalog when it is installed, else the tiny test catalog."""
    path = default_catalog_path()
    return load_catalog(path) if (path / "tools.jsonl").is_file() else tiny_catalog()


def fake_result(spec: ToolSpec, arguments: dict[str, Any]) -> str:
    """The deterministic JSON answer of :func:`fake_implementation` for these arguments."""
    payload = json.dumps({"id": spec.id, "args": arguments}, sort_keys=True, default=str)
    token = f"{spec.name}-{hashlib.sha256(payload.encode('utf-8')).hexdigest()[:8]}"
    return json.dumps({"api": spec.id, "arguments": arguments, "result": token}, sort_keys=True, default=str)


def fake_implementation(spec: ToolSpec) -> Callable[..., str]:
    """A Python callable for ``spec`` with a real signature (from its JSON Schema) and a deterministic
    answer, so catalog APIs can run as tools offline."""
    props = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", ()))
    params = []
    for name, prop in props.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            continue  # the callable still takes it through **kwargs
        ann = _PY_TYPES.get(str(prop.get("type")), Any)
        default = inspect.Parameter.empty if name in required else None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

    def call(**kwargs: Any) -> str:
        return fake_result(spec, {k: v for k, v in kwargs.items() if v is not None})

    call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    call.__name__ = spec.name if spec.name.isidentifier() else "call"
    call.__doc__ = spec.description or spec.name
    return call
