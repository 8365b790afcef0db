"""The ``toolrerank`` parser, built in one place from the command groups, and the entry point."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from toolrerank_plugins.cli import core, graph, learn, llm, proxy, train, tune
from toolrerank_plugins.errors import ToolRerankError

#: Command groups in the order ``toolrerank --help`` lists them; each adds its commands with ``add_parser``.
_GROUPS = (core, learn, train, tune, graph, llm, proxy)


def build_parser() -> argparse.ArgumentParser:
    """The ``toolrerank`` argument parser with every command."""
    from toolrerank_plugins._version import __version__

    p = argparse.ArgumentParser(prog="toolrerank", description="Tool retrieval for LLM agents.")
    p.add_argument("--version", action="version", version=f"toolrerank-plugins {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO (progress bars), -vv DEBUG")
    sub = p.add_subparsers(dest="command", required=True)
    for group in _GROUPS:
        group.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``toolrerank`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Ctrl-C (``KeyboardInterrupt``) ends any command with one line on stderr and exit code 130 (128 + SIGINT),
    not a traceback from wherever it struck (torch, faiss ...). An interrupted ``index`` leaves no engine
    behind: an engine is written to a temporary folder and renamed, and the temporary folder is removed.
    """
    try:
        return _run(argv)
    except KeyboardInterrupt:
        # on a terminal, first end the line a progress bar may have left open
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + "toolrerank: interrupted (Ctrl-C)\n")
        return 130


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # bm25s sets its own logger to DEBUG when imported; filter at the handler so -v/-vv decide.
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)
    if args.verbose < 1:  # model-loading progress bars are noise unless asked for with -v
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.command == "eval" and not args.engine and not args.catalog:
        parser.error("eval needs --catalog (with --pipeline) or --engine")
    try:
        return int(args.func(args))
    except ToolRerankError as exc:
        sys.stderr.write(f"toolrerank: error: {exc}\n")
        return 2
    except ValidationError as exc:  # a config the user gave (a last resort: commands mostly turn it into ConfigError)
        sys.stderr.write(f"toolrerank: error: {exc}\n")
        return 2
