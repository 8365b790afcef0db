"""The LLM port: the one interface the core needs from an agent's LLM.

No framework types: a prompt string or a list of ``{"role": ..., "content": ...}`` messages in, text out,
with an async twin. Adapters (``langchain-toolrerank``, ``llama-index-toolrerank``) wrap their
frameworks' models into it; tests use :class:`toolrerank_plugins.testing.ScriptedLLM`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypedDict, runtime_checkable

from toolrerank_plugins.errors import ToolRerankError


class Message(TypedDict):
    role: str  # "system" | "user" | "assistant"
    content: str


class LLMError(ToolRerankError):
    """The LLM call failed (set ``transient`` for errors worth retrying: rate limits, 5xx, network)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class LLMTimeoutError(LLMError):
    def __init__(self, message: str = "LLM call timed out") -> None:
        super().__init__(message, transient=True)


def as_messages(prompt: str | Sequence[Message]) -> list[Message]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def sampling_options(temperature: float | None, max_tokens: int | None, stop: Sequence[str] | None) -> dict[str, Any]:
    """The sampling controls that were set, as keyword arguments for a framework's model call.

    Example:
        >>> sampling_options(0.0, None, ["\\n"])
        {'temperature': 0.0, 'stop': ['\\n']}
    """
    kwargs: dict[str, Any] = {}
    if temperature is not None:
        kwargs["temperature"] = temperature
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if stop is not None:
        kwargs["stop"] = list(stop)
    return kwargs


@runtime_checkable
class LLM(Protocol):
    """Text in, text out. ``complete`` and ``acomplete`` must give the same kind of answer.

    Args (both methods):
        prompt: a user prompt string, or chat messages.
        temperature, max_tokens, stop: optional sampling controls; ``None`` leaves the model's default.
    """

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str: ...

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str: ...
