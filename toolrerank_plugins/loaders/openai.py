"""OpenAI tool / function schema lists (``[{"type": "function", "function": {...}}, ...]``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError


def from_openai_tools(
    tools: Iterable[Mapping[str, Any]],
    *,
    tool: str | None = None,
    category: str | None = None,
    source: str = "<openai tools>",
) -> Catalog:
    """Build a catalog from OpenAI ``tools`` entries or bare function schemas.

    Each function becomes one API whose id is its name. ``tool``/``category`` set the parent for all.

    Example:
        >>> cat = from_openai_tools([{"type": "function", "function": {"name": "get_weather",
        ...     "description": "Weather for a city", "parameters": {"type": "object",
        ...     "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
        >>> cat["get_weather"].parameters["required"]
        ('city',)

    Raises:
        CatalogError: ``tools`` is not a list, or an entry is invalid (the message names its position).
    """
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise CatalogError(
            f"{source}: tools must be a list of OpenAI tool entries or function schemas, got {type(tools).__name__}"
        )
    specs = []
    for i, entry in enumerate(tools):
        where = f"{source}: entry {i + 1}"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{where}: expected a mapping, got {type(entry).__name__}")
        kind = entry.get("type", "function")
        fn = entry.get("function", entry) if isinstance(kind, str) and kind == "function" else None
        if not isinstance(fn, Mapping):
            shown = repr(kind)[:40] if isinstance(kind, str) else type(kind).__name__
            raise CatalogError(f"{where}: not a function tool (type={shown})")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: function has no 'name'")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        specs.append(
            build_spec(
                where,
                id=name,
                name=name,
                description=fn.get("description") or "",
                tool=tool,
                category=category,
                parameters=params,
                metadata={"format": "openai", **({"strict": fn["strict"]} if "strict" in fn else {})},
            )
        )
    return Catalog(specs, source=source)
