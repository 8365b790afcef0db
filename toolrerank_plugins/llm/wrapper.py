"""One implementation of "a framework's model as the LLM port", shared by the adapters.

An adapter subclasses :class:`LLMWrapper` with a few hooks (messages in its own type, the model call and its
async twin, the reply's text and token counts); sampling options, usage counting, error mapping and the
sync/async pair live here, once.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from toolrerank_plugins.llm.base import LLMError, LLMTimeoutError, Message, sampling_options

M = TypeVar("M")  # a framework's chat message
R = TypeVar("R")  # a framework's reply


def convert_messages(prompt: str | Sequence[Message], make: Mapping[str, Callable[[str], M]]) -> list[M]:
    """LLM-port input (a prompt, or role/content dicts) as a framework's messages, built by role.

    Example:
        >>> make = {"system": lambda c: ("S", c), "user": lambda c: ("U", c), "assistant": lambda c: ("A", c)}
        >>> convert_messages("hi", make), convert_messages([{"role": "system", "content": "be brief"}], make)
        ([('U', 'hi')], [('S', 'be brief')])
        >>> convert_messages([{"role": "robot", "content": "x"}], make)
        Traceback (most recent call last):
        ...
        ValueError: unknown message role 'robot'; use one of ['assistant', 'system', 'user']
    """
    if isinstance(prompt, str):
        return [make["user"](prompt)]
    out: list[M] = []
    for m in prompt:
        build = make.get(m["role"])
        if build is None:
            raise ValueError(f"unknown message role {m['role']!r}; use one of {sorted(make)}")
        out.append(build(m["content"]))
    return out


class LLMWrapper(ABC, Generic[M, R]):
    """A framework's model as :class:`toolrerank_plugins.llm.base.LLM`.

    ``temperature``, ``max_tokens`` and ``stop`` reach the model call only when set; ``usage`` adds up the
    calls and the token counts the model reports. A provider error becomes :class:`LLMError` (a timeout
    :class:`LLMTimeoutError`) naming the model; a message with an unknown role raises ``ValueError``.

    Args:
        target: the wrapped model (named in errors and ``repr``).

    Example:
        >>> class Echo(LLMWrapper[str, str]):
        ...     def _messages(self, prompt): return convert_messages(prompt, {"user": str, "system": str})
        ...     def _call(self, messages, options): return " | ".join(messages)
        ...     async def _acall(self, messages, options): return " | ".join(messages)
        ...     def _text(self, reply): return reply
        >>> llm = Echo(object())
        >>> llm.complete([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]), llm.usage
        ('be brief | hi', {'llm_calls': 1, 'prompt_tokens': 0, 'completion_tokens': 0})
    """

    #: how errors call the wrapped model ("chat model", "LLM")
    label: ClassVar[str] = "LLM"
    #: async calls run on the caller's event loop: a framework model's HTTP client is bound to that loop and
    #: often shared with the agent's own calls (see :mod:`toolrerank_plugins.llm.runtime`)
    caller_loop: ClassVar[bool] = True

    def __init__(self, target: object) -> None:
        self._target = target
        self.usage: dict[str, int] = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    # -- the hooks an adapter writes ------------------------------------------------------------
    @abstractmethod
    def _messages(self, prompt: str | Sequence[Message]) -> list[M]:
        """The prompt as the framework's messages (see :func:`convert_messages`)."""

    @abstractmethod
    def _call(self, messages: list[M], options: dict[str, Any]) -> R:
        """One model call; ``options`` holds the sampling controls that were set."""

    @abstractmethod
    async def _acall(self, messages: list[M], options: dict[str, Any]) -> R:
        """Async twin of :meth:`_call`."""

    @abstractmethod
    def _text(self, reply: R) -> str:
        """The reply's text."""

    def _tokens(self, reply: R) -> tuple[int, int]:
        """``(prompt_tokens, completion_tokens)`` the reply reports (0 when it does not)."""
        return 0, 0

    # -- the LLM port -----------------------------------------------------------------------------
    def _failed(self, exc: Exception) -> LLMError:
        who = f"{self.label} {type(self._target).__name__}"
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            return LLMTimeoutError(f"{who} timed out: {exc}")
        # any provider error: name the model so the stage's error says who failed
        return LLMError(f"{who} failed: {exc}")

    def _record(self, reply: R) -> str:
        self.usage["llm_calls"] += 1
        prompt_tokens, completion_tokens = self._tokens(reply)
        self.usage["prompt_tokens"] += prompt_tokens
        self.usage["completion_tokens"] += completion_tokens
        return self._text(reply)

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        messages = self._messages(prompt)
        try:
            reply = self._call(messages, sampling_options(temperature, max_tokens, stop))
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._record(reply)

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        messages = self._messages(prompt)
        try:
            reply = await self._acall(messages, sampling_options(temperature, max_tokens, stop))
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._record(reply)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self._target).__name__})"
