"""The LLM of one search call: ``engine.search(query, llm=agent_llm)`` runs that call's LLM stages on it.

The engine sets it for the duration of the call and :func:`toolrerank_plugins.llm.registry.resolve_llm` reads
it first. It is a :class:`contextvars.ContextVar`, so it belongs to the thread or asyncio task that made the
call: concurrent searches with different LLMs (threads, ``asyncio.gather``) never see each other's, and the
worker threads the engine starts with ``asyncio.to_thread`` inherit it. This module sits below the engine
and the LLM stages so that both can import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from toolrerank_plugins.errors import ConfigError

_CALL_LLM: ContextVar[Any] = ContextVar("toolrerank_call_llm", default=None)


def call_llm() -> Any:
    """The LLM of the search call running in this thread or task, or ``None``."""
    return _CALL_LLM.get()


@contextmanager
def using_llm(llm: Any) -> Iterator[None]:
    """Run the block's LLM stages on ``llm`` (an object with ``complete()`` and ``acomplete()``: the LLM port);
    ``None`` changes nothing.

    Raises:
        ConfigError: ``llm`` is not an LLM port (a framework's model must be wrapped first, e.g. with
            ``langchain_toolrerank.ChatModelLLM`` or ``llama_index.retrievers.toolrerank.LlamaIndexLLM``).

    Example:
        >>> from toolrerank_plugins.testing import ScriptedLLM
        >>> llm = ScriptedLLM(default="hi")
        >>> with using_llm(llm):
        ...     call_llm() is llm
        True
        >>> call_llm() is None
        True
    """
    if llm is None:
        yield
        return
    if not all(callable(getattr(llm, m, None)) for m in ("complete", "acomplete")):
        raise ConfigError(
            f"llm must be an LLM port with complete() and acomplete() (toolrerank_plugins.llm.LLM), got "
            f"{type(llm).__name__}; wrap a framework's model first (langchain_toolrerank.ChatModelLLM, "
            "llama_index.retrievers.toolrerank.LlamaIndexLLM) or use OpenAICompatLLM"
        )
    token = _CALL_LLM.set(llm)
    try:
        yield
    finally:
        _CALL_LLM.reset(token)
