"""Any LlamaIndex LLM as the core LLM port, so the LLM stages run on the agent's own model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.llms import LLM as LlamaLLM
from llama_index.retrievers.toolrerank._convert import response_text, to_chat_messages

from toolrerank_plugins.llm.base import LLMError, LLMTimeoutError, Message, sampling_options


class LlamaIndexLLM:
    """Wrap a LlamaIndex ``LLM`` into :class:`toolrerank_plugins.llm.base.LLM` (chat API).

    ``temperature``, ``max_tokens`` and ``stop`` are passed to ``llm.chat`` only when set; ``usage`` adds up
    calls and the token counts the LLM reports in ``response.raw["usage"]`` when it does.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> LlamaIndexLLM(MockLLM()).complete("weather in Paris").splitlines()  # MockLLM echoes the prompt
        ['user: weather in Paris', 'assistant: ']
    """

    def __init__(self, llm: LlamaLLM) -> None:
        self.llm = llm
        self.usage: dict[str, int] = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    def _record(self, response: ChatResponse) -> str:
        self.usage["llm_calls"] += 1
        raw = response.raw if isinstance(response.raw, dict) else {}
        usage = raw.get("usage") or {}
        get = usage.get if isinstance(usage, dict) else lambda k, d=0: getattr(usage, k, d)
        self.usage["prompt_tokens"] += int(get("prompt_tokens", 0) or 0)
        self.usage["completion_tokens"] += int(get("completion_tokens", 0) or 0)
        return response_text(response)

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
            response = self.llm.chat(messages, **sampling_options(temperature, max_tokens, stop))
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise LLMTimeoutError(f"LLM {type(self.llm).__name__} timed out: {exc}") from exc
        except Exception as exc:  # any provider error: name the LLM so the stage's error says who failed
            raise LLMError(f"LLM {type(self.llm).__name__} failed: {exc}") from exc
        return self._record(response)

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
            response = await self.llm.achat(messages, **sampling_options(temperature, max_tokens, stop))
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise LLMTimeoutError(f"LLM {type(self.llm).__name__} timed out: {exc}") from exc
        except Exception as exc:
            raise LLMError(f"LLM {type(self.llm).__name__} failed: {exc}") from exc
        return self._record(response)

    def __repr__(self) -> str:
        return f"LlamaIndexLLM({type(self.llm).__name__})"
