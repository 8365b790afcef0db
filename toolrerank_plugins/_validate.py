"""Argument checks of the engine's search API: a wrong argument is the library's ``TypeError`` or
``ValueError`` naming it, never an assertion from numpy, faiss or bm25s (docs/engine.md, "Searching"); a query
that is not valid text is a :class:`~toolrerank_plugins.errors.QueryError` (a ``ToolRerankError`` and a
``ValueError``).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

from toolrerank_plugins.errors import QueryError
from toolrerank_plugins.records import find_surrogate

#: Queries longer than this many characters are cut to it before any stage sees them (encoders read far
#: less: ~1,000 characters fill MiniLM's 256 word pieces). Keeps a 100 KB query from costing 100 KB of
#: tokenising, encoding and LLM prompt.
MAX_QUERY_CHARS = 8192


def _kind(value: Any) -> str:
    return type(value).__name__


def _show(value: Any) -> str:
    """Type and, for short scalars, value: ``str '3'``, ``float nan`` (never a megabyte-long repr)."""
    if isinstance(value, (str, float, bool)) or value is None:
        text = repr(value)
        return f"{_kind(value)} {text if len(text) <= 40 else text[:37] + '...'}"
    return _kind(value)


@overload
def check_top_k(top_k: Any, *, optional: Literal[False] = False, name: str = "top_k") -> int: ...


@overload
def check_top_k(top_k: Any, *, optional: bool, name: str = "top_k") -> int | None: ...


def check_top_k(top_k: Any, *, optional: bool = False, name: str = "top_k") -> int | None:
    """``top_k`` as an ``int`` >= 1 (``None`` too when ``optional``); errors call it ``name``.

    Raises:
        TypeError: not an integer (``bool``, ``float`` — even ``3.0`` or NaN —, ``str``, ``None``).
        ValueError: smaller than 1.
    """
    if top_k is None and optional:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
        allowed = "an int >= 1 or None" if optional else "an int >= 1"
        raise TypeError(f"{name} must be {allowed}, got {_show(top_k)}")
    value = int(top_k)
    if value < 1:
        raise ValueError(f"{name} must be >= 1{' or None' if optional else ''}, got {value}")
    return value


def check_query(query: Any, name: str = "query") -> str:
    """``query`` (a ``str`` without lone surrogates), cut to :data:`MAX_QUERY_CHARS` characters.

    Raises:
        TypeError: not a string.
        QueryError: holds a lone surrogate character (text that is not valid Unicode, e.g. from
            ``"\\ud800"`` in JSON): decode the input with ``errors="replace"`` or remove it. A
            ``ToolRerankError`` and a ``ValueError``.
    """
    if not isinstance(query, str):
        raise TypeError(f"{name} must be a string, got {_kind(query)}")
    m = find_surrogate(query)
    if m is not None:
        raise QueryError(
            f"{name} holds a lone surrogate character (U+{ord(m.group()):04X} at position {m.start()}), which is "
            "not valid text; decode the input with errors='replace' or remove it"
        )
    return query[:MAX_QUERY_CHARS]


def check_queries(queries: Any) -> list[str]:
    """A batch of queries as a list of checked strings (see :func:`check_query`).

    Raises:
        TypeError: ``queries`` is a single string (not a batch), not an iterable, or holds a non-string.
        QueryError: a query holds a lone surrogate character (a ``ValueError`` too).
    """
    if isinstance(queries, (str, bytes, bytearray)):
        raise TypeError(
            f"queries must be a list of strings, not a single string ({_kind(queries)}); use search() for one "
            "query or wrap it in a list"
        )
    if isinstance(queries, Mapping) or not isinstance(queries, Iterable):
        raise TypeError(f"queries must be a list of strings, got {_kind(queries)}")
    out = []
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise TypeError(f"queries must be strings, got {_kind(q)} at queries[{i}]")
        out.append(check_query(q, f"queries[{i}]"))
    return out


def check_exclude(exclude: Any) -> frozenset[str]:
    """``exclude`` (an iterable of API ids, not a single string) as a frozenset.

    Raises:
        TypeError: a single string, a non-iterable, or an element that is not a string.
    """
    if isinstance(exclude, (str, bytes, bytearray)):
        raise TypeError("exclude must be an iterable of API ids, not a single string; wrap it in a list")
    if isinstance(exclude, Mapping) or not isinstance(exclude, Iterable):
        raise TypeError(f"exclude must be an iterable of API ids, got {_kind(exclude)}")
    ids = list(exclude)
    for t in ids:
        if not isinstance(t, str):
            raise TypeError(f"exclude must hold API ids (strings), got {_kind(t)}")
    return frozenset(ids)


def check_candidates(candidates: Any) -> list[Any]:
    """``rerank``'s candidates as a list (each is checked to be a ToolSpec or ScoredTool by the engine).

    Raises:
        TypeError: a single string or a non-iterable.
    """
    if isinstance(candidates, (str, bytes, bytearray, Mapping)) or not isinstance(candidates, Iterable):
        raise TypeError(f"candidates must be a list of ToolSpec or ScoredTool, got {_kind(candidates)}")
    return list(candidates)


def is_blank(query: str) -> bool:
    """A query with no visible character ranks nothing (``search`` returns ``[]``)."""
    return not query.strip()
