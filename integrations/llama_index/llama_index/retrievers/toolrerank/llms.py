"""Any LlamaIndex LLM as the core LLM port, so the LLM stages run on the agent's own model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.llms import LLM as LlamaLLM
from llama_index.retrievers.toolrerank._convert import response_text, to_chat_messages

from toolrerank_plugins.llm.base import Message
from toolrerank_plugins.llm.wrapper import LLMWrapper


class LlamaIndexLLM(LLMWrapper[ChatMessage, ChatResponse]):
    """Wrap a LlamaIndex ``LLM`` into :class:`toolrerank_plugins.llm.base.LLM` (chat API; see
    :class:`~toolrerank_plugins.llm.wrapper.LLMWrapper`); token counts come from ``response.raw["usage"]``
    when the LLM reports them.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> LlamaIndexLLM(MockLLM()).complete("weather in Paris").splitlines()  # MockLLM echoes the prompt
        ['user: weather in Paris', 'assistant: ']
    """

    def __init__(self, llm: LlamaLLM) -> None:
        super().__init__(llm)
        self.llm = llm

    def _messages(self, prompt: str | Sequence[Message]) -> list[ChatMessage]:
        return to_chat_messages(prompt)

    def _call(self, messages: list[ChatMessage], options: dict[str, Any]) -> ChatResponse:
        return self.llm.chat(messages, **options)

    async def _acall(self, messages: list[ChatMessage], options: dict[str, Any]) -> ChatResponse:
        return await self.llm.achat(messages, **options)

    def _text(self, reply: ChatResponse) -> str:
        return response_text(reply)

    def _tokens(self, reply: ChatResponse) -> tuple[int, int]:
        raw = reply.raw if isinstance(reply.raw, dict) else {}
        usage = raw.get("usage") or {}
        get = usage.get if isinstance(usage, dict) else lambda k, d=0: getattr(usage, k, d)
        return int(get("prompt_tokens", 0) or 0), int(get("completion_tokens", 0) or 0)


def as_llm_port(llm: Any) -> Any:
    """``llm`` for the engine's LLM stages: a LlamaIndex ``LLM`` wrapped in :class:`LlamaIndexLLM`, anything
    else (already an LLM port, or ``None``) as it is (the engine checks that it is a port)."""
    return LlamaIndexLLM(llm) if isinstance(llm, LlamaLLM) else llm
