"""Plain Python callables: signature + docstring -> JSON Schema (via pydantic)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text and Google-style ``Args:`` descriptions."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    args: dict[str, str] = {}
    mode = "summary"
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            mode, current = "args", None
            continue
        if _SECTION.match(line):
            mode = "other"
            continue
        if mode == "summary":
            summary.append(line)
        elif mode == "args":
            m = _ARG_LINE.match(line)
            if m and (len(line) - len(line.lstrip())) <= 4:
                current = m.group(1).lstrip("*")
                args[current] = m.group(3).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    return " ".join(s.strip() for s in summary if s.strip()), args


def spec_from_callable(
    fn: Callable[..., Any], *, tool: str | None = None, category: str | None = None, name: str | None = None
) -> ToolSpec:
    """One :class:`ToolSpec` from a function's signature, type hints and Google-style docstring.

    Example:
        >>> def get_weather(city: str, days: int = 1) -> dict:
        ...     '''Forecast for a city.
        ...
        ...     Args:
        ...         city: City name.
        ...         days: Number of days.
        ...     '''
        >>> spec = spec_from_callable(get_weather)
        >>> spec.parameters["required"], spec.parameters["properties"]["days"]["type"]
        (('city',), 'integer')
    """
    from pydantic import ConfigDict, Field, create_model

    if not callable(fn):
        raise CatalogError(f"expected a callable, got {type(fn).__name__}")
    fname = name or getattr(fn, "__name__", None)
    if not fname:
        raise CatalogError(f"callable {fn!r:.60} has no __name__; pass name=")
    if not isinstance(fname, str):
        raise CatalogError(f"callable {fn!r:.60}: its name must be a string, got {type(fname).__name__}")
    for label, value in (("tool", tool), ("category", category)):
        if value is not None and not isinstance(value, str):
            raise CatalogError(f"callable {fname!r}: {label!r} must be a string or None, got {type(value).__name__}")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    try:
        sig = inspect.signature(fn)
        hints = inspect.get_annotations(fn, eval_str=True) if inspect.isfunction(fn) else {}
    except Exception as exc:  # eval_str evaluates string annotations: any expression, any error
        raise CatalogError(f"callable {fname!r}: cannot read its signature or annotations ({exc!r:.200})") from exc
    fields: dict[str, Any] = {}
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in ("self", "cls"):
            continue
        ann = hints.get(pname, param.annotation)
        ann = Any if ann is inspect.Parameter.empty else ann
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (ann, Field(default, description=arg_docs.get(pname) or None))
    try:
        model = create_model(f"{fname}_args", __config__=ConfigDict(arbitrary_types_allowed=True), **fields)
        schema = model.model_json_schema()
    except Exception as exc:  # pydantic raises several types for unsupported annotations
        raise CatalogError(f"callable {fname!r}: cannot build a JSON Schema for its parameters ({exc})") from exc
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("required", [])
    return build_spec(
        f"callable {fname!r}",
        id=fname if tool is None else f"{tool}/{fname}",
        name=fname,
        description=summary,
        tool=tool,
        category=category,
        parameters=schema,
        metadata={"format": "python", "qualname": getattr(fn, "__qualname__", fname)},
    )


def from_callables(
    fns: Iterable[Callable[..., Any]], *, tool: str | None = None, category: str | None = None
) -> Catalog:
    """Catalog of Python callables (see :func:`spec_from_callable`).

    Raises:
        CatalogError: ``fns`` is not a list of callables, or one cannot be described (the message names it).
    """
    if callable(fns) or isinstance(fns, (str, bytes)) or not isinstance(fns, Iterable):
        raise CatalogError(f"<callables>: fns must be a list of callables, got {type(fns).__name__}")
    return Catalog([spec_from_callable(f, tool=tool, category=category) for f in fns], source="<callables>")
