"""Reading catalog files: every failure (unreadable, not UTF-8, not JSON, nested too deeply) is a
:class:`~toolrerank_plugins.errors.CatalogError` naming the file and, where there is one, the line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from toolrerank_plugins.errors import CatalogError, MissingExtraError

_BOM = b"\xef\xbb\xbf"


def read_text(path: Path) -> str:
    """The file's text, decoded as UTF-8 (a leading byte-order mark, which some Windows editors write, is
    dropped)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except ValueError as exc:  # a NUL byte in the path
        raise CatalogError(f"{str(path)!r}: cannot read ({exc})") from exc
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise CatalogError(
            f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from exc


_ESCAPED = re.compile("[\udc80-\udcff]")


def undecodable(line: str) -> str | None:
    """Description of the first byte that was not UTF-8 in a line read with ``errors="surrogateescape"``
    (such bytes become U+DC80..U+DCFF; text read from a file has no other lone surrogates), else ``None``."""
    m = _ESCAPED.search(line)
    if m is None:
        return None
    return f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x} at column {m.start() + 1}); save the file as UTF-8"


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` whose failures are a :class:`CatalogError` starting with ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
    except RecursionError as exc:
        # The C scanner recurses once per nesting level: thousands of '[' exhaust Python's stack.
        raise CatalogError(f"{where}: not valid JSON here (nested too deeply for Python's parser)") from exc
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise CatalogError(f"{where}: not valid JSON here ({exc})") from exc


def parse_document(text: str, source: str) -> Any:
    """A JSON or YAML document as Python data; every failure is a :class:`CatalogError` naming ``source``.

    JSON is tried first; YAML needs PyYAML (the ``openapi`` extra: a :class:`MissingExtraError` naming it when
    it is missing). YAML timestamps stay strings (JSON has no dates; ``2024-01-01`` examples are common).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass  # not JSON: try YAML below
    except RecursionError as exc:
        raise CatalogError(f"{source}: not valid JSON here (nested too deeply for Python's parser)") from exc
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise CatalogError(f"{source}: not valid JSON here ({exc})") from exc
    from toolrerank_plugins._extras import require

    try:
        yaml = require("yaml")
    except MissingExtraError as exc:
        raise MissingExtraError(f"{source}: not JSON, and reading it as YAML needs PyYAML. {exc}") from exc

    class _Loader(yaml.SafeLoader):  # type: ignore[name-defined,misc]
        """Safe YAML, but timestamps stay strings."""

    _Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not valid JSON or YAML ({' '.join(str(exc).split())[:300]})") from exc
    except RecursionError as exc:
        raise CatalogError(f"{source}: YAML nested too deeply for Python's parser") from exc
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise CatalogError(f"{source}: YAML value cannot be read ({exc})") from exc
