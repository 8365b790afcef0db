"""Where LLM stages find the host's LLM: a process-wide registry of named LLMs.

An LLM object cannot live in a JSON engine config, so a stage's config names one (``"llm": "default"``)
and the stage looks the name up when a query runs. Register before searching::

    from toolrerank_plugins.llm import register_llm
    register_llm("default", my_llm)        # any object with complete()/acomplete()

A stage built in Python can also be handed its LLM directly (``QueryGenerationStage(cfg, llm=my_llm)``),
which wins over the registry; failing both, an ``engine.llm`` attribute set by the user is used. One search
call can hand its LLM stages an LLM of its own (``engine.search(query, llm=agent_llm)``, e.g. the agent's
model): it wins over all three for that call only.
"""

from __future__ import annotations

import threading
from typing import Any

from toolrerank_plugins._call_llm import call_llm
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.llm.base import LLM

_LOCK = threading.Lock()
_LLMS: dict[str, LLM] = {}


def register_llm(name: str, llm: LLM) -> None:
    """Register (or replace) the LLM that stages naming ``name`` will call."""
    if not (hasattr(llm, "complete") and callable(llm.complete)):
        raise ConfigError(
            f"register_llm({name!r}, ...): {type(llm).__name__} has no complete() method; wrap your model "
            "with an adapter (langchain-toolrerank, llama-index-toolrerank) or OpenAICompatLLM"
        )
    with _LOCK:
        _LLMS[name] = llm


def unregister_llm(name: str) -> None:
    with _LOCK:
        _LLMS.pop(name, None)


def registered_names(llm: object) -> list[str]:
    """The names ``llm`` (this very object) is registered under, sorted (for messages about it)."""
    with _LOCK:
        return sorted(name for name, x in _LLMS.items() if x is llm)


def known_llms() -> list[str]:
    with _LOCK:
        return sorted(_LLMS)


def resolve_llm(name: str, explicit: LLM | None = None, engine: Any = None) -> LLM | None:
    """The stage's LLM: the current search call's (``engine.search(..., llm=)``), else the one passed
    explicitly, else the registered ``name``, else ``engine.llm``."""
    per_call = call_llm()
    if per_call is not None:
        return per_call
    if explicit is not None:
        return explicit
    with _LOCK:
        llm = _LLMS.get(name)
    if llm is not None:
        return llm
    return getattr(engine, "llm", None) if engine is not None else None
