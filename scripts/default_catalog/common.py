"""Tiny helpers for writing the hand-made default catalog compactly."""

from __future__ import annotations

from typing import Any


def _p(typ: str, desc: str, **kw: Any) -> dict:
    out: dict[str, Any] = {"type": typ, "description": desc}
    for key in ("enum", "default", "format", "minimum", "maximum", "items", "properties", "required"):
        if key in kw and kw[key] is not None:
            out[key] = kw[key]
    return out


def S(desc: str, **kw: Any) -> dict:
    return _p("string", desc, **kw)


def I(desc: str, **kw: Any) -> dict:  # noqa: E743
    return _p("integer", desc, **kw)


def N(desc: str, **kw: Any) -> dict:
    return _p("number", desc, **kw)


def B(desc: str, **kw: Any) -> dict:
    return _p("boolean", desc, **kw)


def A(items: dict, desc: str, **kw: Any) -> dict:
    return _p("array", desc, items=items, **kw)


def O(desc: str, **props: dict) -> dict:  # noqa: E743
    return {"type": "object", "description": desc, "properties": props}


def R(**props: dict) -> dict:
    """A `returns` object schema with named properties."""
    return {"type": "object", "properties": props}


def api(name: str, description: str, params: dict | None = None, required: list | tuple = (),
        returns: dict | None = None) -> dict:
    # Convention: an API does not echo the identifier it was called with (a cart_id passed to add_item is
    # not listed among add_item's outputs), so each id has few producers and data flow stays visible.
    if returns is not None:
        echoed = {r for r in required if r.endswith("_id") or r == "symbol"}
        returns = {**returns, "properties": {k: v for k, v in returns["properties"].items() if k not in echoed}}
        if not returns["properties"]:
            raise ValueError(f"{name}: returns would be empty after dropping echoed ids")
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": dict(params or {}), "required": list(required)},
        "returns": returns,
    }


def tool(name: str, category: str, description: str, apis: list) -> dict:
    return {"tool": name, "category": category, "tool_description": description, "apis": apis}


# Frequently reused parameter / return pieces.
ACCESS_TOKEN = S("Bearer access token returned by the KeyGate `login` call.")
API_KEY = S("Account API key issued in the vendor dashboard.")
LIMIT = I("Maximum number of results to return.", default=20, minimum=1, maximum=100)
PAGE = I("1-based page number for paginated results.", default=1, minimum=1)
CURRENCY = S("ISO 4217 currency code, e.g. USD or EUR.", default="USD")
LANG = S("BCP 47 language tag for localized text, e.g. en-US.", default="en-US")
