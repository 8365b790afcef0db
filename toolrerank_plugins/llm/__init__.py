"""LLM stages running on the host agent's LLM, through a minimal port (:class:`LLM`)."""

from __future__ import annotations

from toolrerank_plugins.llm.base import LLM, LLMError, LLMTimeoutError, Message, as_messages

__all__ = ["LLM", "LLMError", "LLMTimeoutError", "Message", "as_messages"]
