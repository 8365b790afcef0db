"""LLM stages running on the host agent's LLM, through a minimal port (:class:`LLM`).

Stages (``query_generation``, ``qta_rewrite``, ``iterative_feedback``) find their LLM by name in a registry:
``register_llm("default", my_llm)``. See ``docs/llm-stages.md``.
"""

from __future__ import annotations

from toolrerank_plugins.llm.base import LLM, LLMError, LLMTimeoutError, Message, as_messages
from toolrerank_plugins.llm.registry import known_llms, register_llm, resolve_llm, unregister_llm

__all__ = [
    "LLM",
    "LLMError",
    "LLMTimeoutError",
    "Message",
    "as_messages",
    "known_llms",
    "register_llm",
    "resolve_llm",
    "unregister_llm",
]
