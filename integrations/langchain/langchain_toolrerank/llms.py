"""Any LangChain chat model as the core LLM port, so the LLM stages run on the agent's own model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from langchain_toolrerank._convert import message_text, to_chat_messages
from toolrerank_plugins.llm.base import Message
from toolrerank_plugins.llm.wrapper import LLMWrapper


class ChatModelLLM(LLMWrapper[BaseMessage, BaseMessage]):
    """Wrap a LangChain chat model into :class:`toolrerank_plugins.llm.base.LLM` (see
    :class:`~toolrerank_plugins.llm.wrapper.LLMWrapper`); token counts come from ``usage_metadata``.

    Args:
        model: any ``BaseChatModel`` (the agent's own model).
        config: a ``RunnableConfig`` passed with every call (tags, metadata, callbacks), e.g. to mark the
            stage calls as internal to a middleware.

    Example:
        >>> from langchain_core.language_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage
        >>> llm = ChatModelLLM(GenericFakeChatModel(messages=iter([AIMessage("weather in Paris")])))
        >>> llm.complete([{"role": "system", "content": "rewrite"}, {"role": "user", "content": "paris?"}])
        'weather in Paris'
    """

    label = "chat model"

    def __init__(self, model: BaseChatModel, *, config: RunnableConfig | None = None) -> None:
        super().__init__(model)
        self.model = model
        self.config = config

    def _messages(self, prompt: str | Sequence[Message]) -> list[BaseMessage]:
        return to_chat_messages(prompt)

    def _call(self, messages: list[BaseMessage], options: dict[str, Any]) -> BaseMessage:
        return self.model.invoke(messages, self.config, **options)

    async def _acall(self, messages: list[BaseMessage], options: dict[str, Any]) -> BaseMessage:
        return await self.model.ainvoke(messages, self.config, **options)

    def _text(self, reply: BaseMessage) -> str:
        return message_text(reply)

    def _tokens(self, reply: BaseMessage) -> tuple[int, int]:
        meta = getattr(reply, "usage_metadata", None) or {}
        return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
