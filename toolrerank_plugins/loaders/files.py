"""A catalog file (or folder) in any format the loaders read, detected by its content or named.

:func:`load_catalog_file` is what ``toolrerank index / eval / search ...`` call with the path they are given;
:func:`detect_format` says what a file holds. The formats:

- ``jsonl``: our normalized JSONL (``tools.jsonl`` [+ ``edges.jsonl``]; a folder is always this);
- ``openapi``: an OpenAPI 3.x or Swagger 2.0 document, JSON or YAML (:func:`~.openapi.from_openapi`);
- ``mcp``: an MCP ``tools/list`` result: ``{"tools": [...]}``, a bare list of MCP tools (``inputSchema``), the
  JSON-RPC response holding one, or ``{server: result}`` (:func:`~.mcp.from_mcp_tools`);
- ``openai``: an OpenAI tool list: chat completions ``[{"type": "function", "function": {...}}]``, Responses
  ``[{"type": "function", "name": ...}]``, bare function schemas, or a request body with a ``tools`` list of
  them (:func:`~.openai.from_openai_tools`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.loaders._read import parse_document, read_text, undecodable

CatalogFormat = Literal["jsonl", "openapi", "mcp", "openai"]
#: The formats :func:`load_catalog_file` reads (``--format`` of the CLI).
CATALOG_FORMATS: tuple[str, ...] = get_args(CatalogFormat)

#: What each format is, for messages ("expected ..., found ...").
FORMAT_DESCRIPTIONS: Mapping[str, str] = {
    "jsonl": "a JSONL catalog (one API record per line with 'id' and 'name'; a folder holding tools.jsonl)",
    "openapi": "an OpenAPI 3.x or Swagger 2.0 document (JSON or YAML)",
    "mcp": "an MCP tools/list result (a JSON object with a 'tools' list, a JSON list of MCP tools with "
    "'inputSchema', or the JSON-RPC response holding one)",
    "openai": "an OpenAI tool list (a JSON list of {'type': 'function', 'function': {...}} or of "
    "{'type': 'function', 'name': ...}, or of function schemas)",
}

_MCP_TOOL_KEYS = ("inputSchema", "input_schema")


class _Sniffed:
    """What a file holds: its format (``None``: none we know), the parsed document (``None`` for JSONL, which
    is streamed by its own loader) and a few words saying what was found."""

    __slots__ = ("format", "data", "found")

    def __init__(self, format: str | None, data: Any, found: str) -> None:
        self.format = format
        self.data = data
        self.found = found


def _first_line(path: Path) -> tuple[str | None, bool]:
    """The first non-blank line of a file and whether anything but blank lines follows it (read as UTF-8
    with a byte-order mark dropped; bytes that are not UTF-8 come back as U+DC80..U+DCFF)."""
    try:
        fh = path.open("r", encoding="utf-8-sig", errors="surrogateescape")
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{str(path)!r}: cannot open ({exc})") from exc
    with fh:
        first = None
        for line in fh:
            if not line.strip():
                continue
            if first is None:
                first = line
                continue
            return first, True
        return first, False


def _json_container(line: str) -> Any:
    """``line`` parsed as a JSON object or list, else ``None`` (not JSON, a scalar, or bytes that are not
    UTF-8: the format's own reader reports those with their position)."""
    if undecodable(line) is not None:
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (Mapping, list)) else None


def _is_openai_entry(entry: Any, *, bare: bool = True) -> bool:
    """An OpenAI tool (``{"type": "function", ...}`` or ``{"function": {...}}``), or with ``bare`` a function
    schema: a ``name`` and none of an MCP tool's schema keys (``parameters`` is optional in both)."""
    if not isinstance(entry, Mapping):
        return False
    if entry.get("type") == "function" or isinstance(entry.get("function"), Mapping):
        return True
    return bare and isinstance(entry.get("name"), str) and not any(k in entry for k in _MCP_TOOL_KEYS)


def _is_mcp_entry(entry: Any) -> bool:
    return isinstance(entry, Mapping) and isinstance(entry.get("name"), str) and not _is_openai_entry(entry, bare=False)


def _keys(value: Mapping[Any, Any]) -> str:
    keys = [repr(k) for k in list(value)[:6]]
    more = f" and {len(value) - 6} more" if len(value) > 6 else ""
    return ", ".join(keys) + more if keys else "no keys"


def _shape(value: Any, syntax: str) -> str:
    """A few words on a parsed document of no known format ("a JSON object with keys 'a', 'b'")."""
    if isinstance(value, Mapping):
        return f"a {syntax} object with keys {_keys(value)}"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a {syntax} list of {len(value)} {'/'.join(kinds) or 'items'}"
    return f"a {syntax} {type(value).__name__}"


def _kind_of(data: Any, syntax: str = "JSON") -> _Sniffed:
    """The format of a parsed document (``data`` unwrapped where the format's loader needs it, e.g. the
    ``result`` of a JSON-RPC response)."""
    if isinstance(data, Mapping):
        if "openapi" in data or "swagger" in data:
            if "openapi" in data:
                return _Sniffed("openapi", data, f"an OpenAPI {str(data['openapi'])[:20]} document")
            return _Sniffed("openapi", data, f"a Swagger {str(data['swagger'])[:20]} document")
        if "jsonrpc" in data:
            if isinstance(data.get("error"), Mapping):
                err = data["error"]
                raise CatalogError(
                    f"a JSON-RPC error response, not a tools/list result (code {err.get('code')!r}: "
                    f"{str(err.get('message'))[:200]})"
                )
            if "result" in data:
                inner = _kind_of(data["result"], syntax)
                if inner.format == "mcp":
                    return _Sniffed("mcp", inner.data, f"a JSON-RPC response holding {inner.found}")
                return _Sniffed(None, data, f"a JSON-RPC response holding {inner.found}")
        tools = data.get("tools")
        if isinstance(tools, list):
            if tools and all(_is_openai_entry(t, bare=False) for t in tools):
                return _Sniffed("openai", tools, f"an OpenAI request body with {len(tools)} tools")
            return _Sniffed("mcp", data, f"an MCP tools/list result ({len(tools)} tools)")
        functions = data.get("functions")
        if isinstance(functions, list) and functions and all(_is_openai_entry(f, bare=False) for f in functions):
            return _Sniffed("openai", functions, f"an OpenAI request body with {len(functions)} functions")
        if isinstance(data.get("id"), str) and isinstance(data.get("name"), str):
            return _Sniffed("jsonl", None, "a JSONL catalog record")
        if data and all(
            (isinstance(v, Mapping) and isinstance(v.get("tools"), list))
            or (isinstance(v, list) and bool(v) and all(_is_mcp_entry(t) for t in v))
            for v in data.values()
        ):
            return _Sniffed("mcp", data, f"MCP tools/list results of {len(data)} servers")
        return _Sniffed(None, data, _shape(data, syntax))
    if isinstance(data, list) and data and all(isinstance(t, Mapping) for t in data):
        if any(k in t for t in data for k in _MCP_TOOL_KEYS) and all(_is_mcp_entry(t) for t in data):
            return _Sniffed("mcp", data, f"a list of {len(data)} MCP tools")
        if all(_is_openai_entry(t) for t in data):
            return _Sniffed("openai", data, f"an OpenAI tool list ({len(data)} tools)")
    return _Sniffed(None, data, _shape(data, syntax))


def _sniff(path: Path) -> _Sniffed:
    """Read just enough of ``path`` to know its format: JSON lines are recognised from the first line (and
    streamed later by the JSONL loader); anything else is parsed whole, as JSON, else YAML."""
    first, more = _first_line(path)
    if first is None:
        raise CatalogError(f"{path}: the file is empty")
    head = _json_container(first)
    if head is not None and more:
        if isinstance(head, Mapping):  # JSON objects, one a line: JSONL (its loader names a bad record's line)
            return _Sniffed("jsonl", None, "JSONL records")
        return _Sniffed(None, None, f"JSON lines starting with {_shape(head, 'JSON')}")
    if head is not None:  # a whole document on one line
        return _classify(path, head, "JSON")
    text = read_text(path)
    syntax = "JSON" if text.lstrip().startswith(("{", "[")) else "YAML"
    try:
        data = parse_document(text, str(path))
    except CatalogError as exc:
        if syntax == "YAML":
            raise CatalogError(
                f"{path}: not a catalog file: expected JSON, JSON lines or YAML holding one of "
                f"{', '.join(CATALOG_FORMATS)}; found text that is none of them ({exc})"
            ) from exc
        raise
    return _classify(path, data, syntax)


def _classify(path: Path, data: Any, syntax: str) -> _Sniffed:
    try:
        return _kind_of(data, syntax)
    except CatalogError as exc:
        raise CatalogError(f"{path}: {exc}") from exc


def detect_format(path: str | Path) -> CatalogFormat:
    """The format of a catalog file or folder: ``"jsonl"``, ``"openapi"``, ``"mcp"`` or ``"openai"``.

    Example:
        >>> from toolrerank_plugins.catalog import default_catalog_path
        >>> detect_format(default_catalog_path())
        'jsonl'

    Raises:
        CatalogError: it holds none of them (the message says what it found).
    """
    path = Path(path)
    if path.is_dir():
        return "jsonl"
    if not path.exists():
        raise CatalogError(f"{path}: no such catalog file or directory")
    sniffed = _sniff(path)
    if sniffed.format is None:
        raise CatalogError(_unknown(path, sniffed.found))
    return sniffed.format  # type: ignore[return-value]


def _unknown(path: Path, found: str) -> str:
    return (
        f"{path}: not a catalog file of a known format: expected "
        + "; or ".join(FORMAT_DESCRIPTIONS[f] for f in CATALOG_FORMATS)
        + f"; found {found}"
    )


def _load(path: Path, fmt: str, data: Any, with_edges: bool) -> Catalog:
    from toolrerank_plugins.loaders.jsonl import load_catalog
    from toolrerank_plugins.loaders.mcp import from_mcp_tools
    from toolrerank_plugins.loaders.openai import from_openai_tools
    from toolrerank_plugins.loaders.openapi import from_openapi

    source = str(path)
    if fmt == "jsonl":
        return load_catalog(path, with_edges=with_edges)
    if fmt == "openapi":
        return from_openapi(data, source=source)
    if fmt == "mcp":
        return from_mcp_tools(data, source=source)
    return from_openai_tools(data, source=source)


def load_catalog_file(path: str | Path, format: CatalogFormat | None = None, *, with_edges: bool = True) -> Catalog:
    """Load a catalog from a file or folder in any supported format, detected by its content.

    A folder is a JSONL catalog (``tools.jsonl`` [+ ``edges.jsonl``], as :func:`~.jsonl.load_catalog`). A file
    is recognised by what it holds, whatever its name: JSONL records, an OpenAPI 3.x / Swagger 2.0 document
    (JSON or YAML; YAML needs the ``openapi`` extra), an MCP ``tools/list`` result (``{"tools": [...]}``, a list
    of MCP tools, the JSON-RPC response holding one, or ``{server: result}``) or an OpenAI tool list (chat
    completions or Responses style, or a request body with ``tools``). The catalog is the one the format's own
    loader gives (:func:`from_openapi`, :func:`from_mcp_tools`, :func:`from_openai_tools`), with the file as
    its ``source``.

    Args:
        path: the file or folder.
        format: ``"jsonl"``, ``"openapi"``, ``"mcp"`` or ``"openai"`` to skip detection; a file holding
            another format is then an error naming both.
        with_edges: read ``edges.jsonl`` next to ``tools.jsonl`` (folders only).

    Example:
        >>> import json, tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "tools.json"
        >>> _ = f.write_text(json.dumps([{"type": "function", "function": {"name": "get_weather",
        ...     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]))
        >>> detect_format(f), load_catalog_file(f).ids
        ('openai', ['get_weather'])

    Raises:
        CatalogError: the path does not exist, the file holds no known format (or not the one named), or the
            format's loader refuses an entry; every message names the file, and a format mismatch says what
            was expected and what was found.
        MissingExtraError: a YAML file without PyYAML installed (the ``openapi`` extra).
    """
    if format is not None and format not in CATALOG_FORMATS:
        raise CatalogError(f"unknown catalog format {format!r}; known formats: {', '.join(CATALOG_FORMATS)}")
    path = Path(path)
    if path.is_dir():
        if format not in (None, "jsonl"):
            raise CatalogError(
                f"{path}: expected {FORMAT_DESCRIPTIONS[format]} in a file, found a folder (a folder is a "
                "JSONL catalog: tools.jsonl [+ edges.jsonl]); give the file, or leave the format out"
            )
        return _load(path, "jsonl", None, with_edges)
    if not path.exists():
        raise CatalogError(f"{path}: no such catalog file or directory")
    sniffed = _sniff(path)
    if format is None:
        if sniffed.format is None:
            raise CatalogError(_unknown(path, sniffed.found))
        return _load(path, sniffed.format, sniffed.data, with_edges)
    if sniffed.format is not None and sniffed.format != format:
        raise CatalogError(
            f"{path}: expected {FORMAT_DESCRIPTIONS[format]}, found {sniffed.found}; read it as format "
            f"{sniffed.format!r} (--format {sniffed.format}), or leave the format out to detect it"
        )
    if sniffed.format is None:
        raise CatalogError(f"{path}: expected {FORMAT_DESCRIPTIONS[format]}, found {sniffed.found}")
    return _load(path, format, sniffed.data, with_edges)
