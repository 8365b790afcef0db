"""Command line: ``toolrerank index | search | eval | demo | train | tune | graph | llm``.

The parser is built in :func:`build_parser` (``main.py``) from one module per command group: ``core`` (index,
search, eval, demo), ``train``, ``tune``, ``graph`` and ``llm``; shared helpers live in ``_common``. Nothing in the
library imports this package: the CLI is the top layer.
"""

from __future__ import annotations

from toolrerank_plugins.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
