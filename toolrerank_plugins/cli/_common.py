"""Helpers shared by the command groups: printing, catalogs and pipelines, and the ``--llm`` options."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolrerank_plugins._extras import import_object
from toolrerank_plugins.errors import ConfigError, MissingExtraError, ToolRerankError
from toolrerank_plugins.records import find_surrogate


def out(text: str = "") -> None:
    """One line of command output on stdout (the CLI is the only layer that prints)."""
    sys.stdout.write(text + "\n")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` of a count that must be >= ``minimum``: a usage error otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


#: ``--top-k``, ``--k``
positive_int = int_at_least(1)
#: a count where 0 means "none" or "all" (``--limit``, ``--batch-size``)
non_negative_int = int_at_least(0)


def query_text(text: str) -> str:
    """argparse ``type=`` of a query: text that is not valid UTF-8 (Python passes its bytes on as lone
    surrogates) is a usage error naming the byte, not a traceback from the search."""
    m = find_surrogate(text)
    if m is not None:
        c = ord(m.group())
        what = f"byte 0x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"U+{c:04X}"
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8 ({what} at position {m.start()}); pass the query as UTF-8 text"
        )
    return text


def writable_file(path: str, option: str) -> None:
    """Raise :class:`ToolRerankError` unless ``path`` can be written as a file: checked before long work
    whose result goes there, so nothing computed is lost to a bad path."""
    if "\0" in path:
        raise ToolRerankError(f"{option} {path!r}: a path cannot hold a NUL byte")
    target = Path(path)
    if target.is_dir():
        raise ToolRerankError(f"{option} {path}: is a folder; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise ToolRerankError(f"{option} {path}: the folder {parent} does not exist")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(parent, os.W_OK | os.X_OK)
    if not writable:
        raise ToolRerankError(f"{option} {path}: permission denied")


def add_format_argument(p: argparse.ArgumentParser) -> None:
    """``--format``: the catalog's format when detection should be skipped (see :func:`load_catalog`)."""
    from toolrerank_plugins.loaders import CATALOG_FORMATS

    p.add_argument(
        "--format",
        choices=CATALOG_FORMATS,
        default=None,
        help="format of the catalog file (default: detected from its content): jsonl (tools.jsonl, or a folder "
        "holding one), openapi (OpenAPI 3.x / Swagger 2.0, JSON or YAML), mcp (a tools/list result), openai "
        "(an OpenAI tool list)",
    )


def load_catalog(path: str, args: argparse.Namespace | None = None) -> Any:
    """The catalog at ``path`` (a folder or a file of any format the loaders read; ``--format`` when given)."""
    from toolrerank_plugins.loaders import load_catalog_file

    return load_catalog_file(path, getattr(args, "format", None))


def non_blank_query(text: str) -> str:
    """argparse ``type=`` of a search query: :func:`query_text`, and not empty or blank (a search for
    nothing ranks nothing: a usage error rather than an empty answer)."""
    text = query_text(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("the query is empty; give the request to search for, e.g. 'send an SMS'")
    return text


def engine_config(args: argparse.Namespace) -> Any:
    """The EngineConfig named by ``--pipeline`` (a preset name or a .json file)."""
    from toolrerank_plugins.pipelines import pipeline_config

    return pipeline_config(args.pipeline)


def pipeline_help(text: str) -> str:
    """``--pipeline`` help: ``text`` followed by the registered pipeline names."""
    from toolrerank_plugins.pipelines import known_pipelines

    return f"{text}; known: {', '.join(known_pipelines())}"


def add_llm_arguments(p: argparse.ArgumentParser) -> None:
    """``--llm`` and its sibling options (an argument group of ``p``).

    ``--llm`` names the LLM the LLM stages use:

    - ``http(s)://host:port/v1`` — an OpenAI-compatible server (Ollama, vLLM, llama.cpp); needs ``--llm-model``.
    - ``package.module:attr`` — a Python object implementing the port, or a zero-argument factory returning one
      (e.g. a function wrapping a LangChain chat model with ``langchain-toolrerank``).
    - ``replay`` — answers only from ``--llm-cache`` (no LLM at all).

    ``--llm-cache DIR`` wraps it in the record/replay disk cache, so a second run costs nothing.
    """
    g = p.add_argument_group("LLM (for the LLM stages)")
    g.add_argument("--llm", help="OpenAI-compatible base URL, 'module:attr' (LLM or factory), or 'replay'")
    g.add_argument("--llm-model", help="model name (OpenAI-compatible server; also the cache namespace)")
    g.add_argument("--llm-name", default="default", help="registry name the stages look up (default: default)")
    g.add_argument("--llm-cache", help="record/replay cache directory")
    g.add_argument("--llm-cache-mode", choices=["auto", "record", "replay"], default="auto")
    g.add_argument("--llm-timeout", type=float, default=120.0, help="HTTP timeout of the OpenAI-compatible client")


def build_llm(args: argparse.Namespace) -> Any:
    """The LLM named by ``--llm`` (wrapped in the cache when ``--llm-cache``), or None without ``--llm``."""
    spec = getattr(args, "llm", None)
    if not spec:
        return None
    from toolrerank_plugins.llm.cache import CachedLLM

    llm: Any
    if spec == "replay":
        if not args.llm_cache:
            raise ConfigError("--llm replay needs --llm-cache DIR holding recorded answers")
        return CachedLLM(None, args.llm_cache, mode="replay", namespace=args.llm_model or "")
    if spec.startswith(("http://", "https://")):
        if not args.llm_model:
            raise ConfigError("--llm URL needs --llm-model NAME (the model the server serves)")
        from toolrerank_plugins.llm.openai_compat import OpenAICompatLLM

        llm = OpenAICompatLLM(spec, model=args.llm_model, timeout_s=args.llm_timeout)
    elif ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj = import_object(spec)
        except MissingExtraError:
            raise
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"--llm {spec}: cannot import {attr!r} from {module!r} ({exc})") from exc
        llm = obj if hasattr(obj, "complete") else obj()
        if not hasattr(llm, "complete"):
            raise ConfigError(f"--llm {spec}: {type(llm).__name__} has no complete(); it is not an LLM")
    else:
        raise ConfigError(f"--llm {spec!r}: expected an http(s) URL, 'module:attr' or 'replay'")
    if args.llm_cache:
        llm = CachedLLM(llm, args.llm_cache, mode=args.llm_cache_mode, namespace=args.llm_model or "")
    return llm


def register_llm_from_args(args: argparse.Namespace) -> Any:
    """Build the ``--llm`` LLM and register it under ``--llm-name`` for the stages; None without ``--llm``."""
    llm = build_llm(args)
    if llm is not None:
        from toolrerank_plugins.llm.registry import register_llm

        register_llm(args.llm_name, llm)
    return llm
