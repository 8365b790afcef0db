"""Any LangChain chat model as the core LLM port, so the LLM stages run on the agent's own model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from langchain_toolrerank._convert import message_text, to_chat_messages
from toolrerank_plugins.llm.base import LLMError, LLMTimeoutError, Message, sampling_options


class ChatModelLLM:
    """Wrap a LangChain chat model into :class:`toolrerank_plugins.llm.base.LLM`.

    ``temperature`` and ``max_tokens`` are passed to the model call only when set; ``usage`` adds up the
    calls and the token counts the model reports (``usage_metadata``).

    Args:
        model: any ``BaseChatModel`` (the agent's own model).

    Example:
        >>> from langchain_core.language_models import GenericFakeChatModel
        >>> from langchain_core.messages import AIMessage
        >>> llm = ChatModelLLM(GenericFakeChatModel(messages=iter([AIMessage("weather in Paris")])))
        >>> llm.complete([{"role": "system", "content": "rewrite"}, {"role": "user", "content": "paris?"}])
        'weather in Paris'
    """

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model
        self.usage: dict[str, int] = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    def _record(self, reply: BaseMessage) -> str:
        self.usage["llm_calls"] += 1
        meta = getattr(reply, "usage_metadata", None) or {}
        self.usage["prompt_tokens"] += int(meta.get("input_tokens", 0))
        self.usage["completion_tokens"] += int(meta.get("output_tokens", 0))
        return message_text(reply)

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        messages = to_chat_messages(prompt)
        try:
            reply = self.model.invoke(messages, **sampling_options(temperature, max_tokens, stop))
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise LLMTimeoutError(f"chat model {type(self.model).__name__} timed out: {exc}") from exc
        except Exception as exc:  # any provider error: name the model so the stage's error says who failed
            raise LLMError(f"chat model {type(self.model).__name__} failed: {exc}") from exc
        return self._record(reply)

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        messages = to_chat_messages(prompt)
        try:
            reply = await self.model.ainvoke(messages, **sampling_options(temperature, max_tokens, stop))
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise LLMTimeoutError(f"chat model {type(self.model).__name__} timed out: {exc}") from exc
        except Exception as exc:
            raise LLMError(f"chat model {type(self.model).__name__} failed: {exc}") from exc
        return self._record(reply)

    def __repr__(self) -> str:
        return f"ChatModelLLM({type(self.model).__name__})"
