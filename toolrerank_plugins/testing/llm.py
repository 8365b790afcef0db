"""A scripted fake of the LLM port for tests: canned answers, failures, latency, and a record of every call.

Responses come from ``rules`` first (the first rule whose regex or predicate matches the prompt), then from
the ``responses`` sequence in order, then ``default``. A response is a string, an exception (raised), a
callable ``(prompt_text) -> response``, or a :class:`Delay` (sleep, then answer — to exercise timeouts).

Example:
    >>> llm = ScriptedLLM(["first", RuntimeError("boom")], rules=[(r"weather", "forecast API")], default="N/A")
    >>> llm.complete("what is the weather"), llm.complete("hello")
    ('forecast API', 'first')
    >>> llm.complete("again")
    Traceback (most recent call last):
    ...
    RuntimeError: boom
    >>> llm.complete("more"), len(llm.calls)
    ('N/A', 4)
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolrerank_plugins.llm.base import Message, as_messages


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (``time.sleep`` / ``asyncio.sleep``), then give ``then``."""

    seconds: float
    then: Any = ""


Response = str | BaseException | Callable[[str], Any] | Delay


@dataclass(frozen=True)
class ScriptedCall:
    """One recorded call: the messages and the sampling arguments."""

    messages: list[Message]
    temperature: float | None
    max_tokens: int | None
    stop: Sequence[str] | None
    asynchronous: bool

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


class ScriptedLLM:
    """Deterministic stand-in for an LLM (see the module docstring).

    Args:
        responses: answers given in order, one per call not matched by a rule.
        rules: ``(regex or predicate, response)`` pairs tried first, in order, on the prompt text.
        default: the answer once ``responses`` is used up (``None``: raise ``IndexError``, a test bug).
        latency_s: sleep before every answer.
        cycle: repeat ``responses`` forever instead of falling through to ``default``.
    """

    def __init__(
        self,
        responses: Sequence[Response] = (),
        *,
        rules: Sequence[tuple[str | re.Pattern[str] | Callable[[str], bool], Response]] = (),
        default: Response | None = None,
        latency_s: float = 0.0,
        cycle: bool = False,
    ) -> None:
        self.responses = list(responses)
        self.rules = [(re.compile(p, re.I | re.S) if isinstance(p, str) else p, r) for p, r in rules]
        self.default = default
        self.latency_s = latency_s
        self.cycle = cycle
        self.calls: list[ScriptedCall] = []
        self._next = 0
        self._lock = threading.Lock()

    @property
    def prompts(self) -> list[str]:
        return [c.text for c in self.calls]

    def _pick(self, text: str) -> Response:
        for pattern, response in self.rules:
            if isinstance(pattern, re.Pattern):
                if pattern.search(text):
                    return response
            elif pattern(text):
                return response
        with self._lock:
            if self._next < len(self.responses):
                r = self.responses[self._next]
                self._next += 1
                if self.cycle and self._next >= len(self.responses):
                    self._next = 0
                return r
        if self.default is None:
            raise IndexError(f"ScriptedLLM ran out of responses after {len(self.calls)} calls and has no default")
        return self.default

    def _record(
        self,
        prompt: str | Sequence[Message],
        temperature: float | None,
        max_tokens: int | None,
        stop: Sequence[str] | None,
        asynchronous: bool,
    ) -> str:
        msgs = as_messages(prompt)
        with self._lock:
            self.calls.append(ScriptedCall(msgs, temperature, max_tokens, stop, asynchronous))
        return "\n".join(m["content"] for m in msgs)

    @staticmethod
    def _resolve(response: Any, text: str) -> Any:
        while callable(response) and not isinstance(response, BaseException):
            response = response(text)
        return response

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        text = self._record(prompt, temperature, max_tokens, stop, False)
        if self.latency_s:
            time.sleep(self.latency_s)
        r = self._resolve(self._pick(text), text)
        while isinstance(r, Delay):
            time.sleep(r.seconds)
            r = self._resolve(r.then, text)
        if isinstance(r, BaseException):
            raise r
        return r  # type: ignore[no-any-return]

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        text = self._record(prompt, temperature, max_tokens, stop, True)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        r = self._resolve(self._pick(text), text)
        while isinstance(r, Delay):
            await asyncio.sleep(r.seconds)
            r = self._resolve(r.then, text)
        if isinstance(r, BaseException):
            raise r
        return r  # type: ignore[no-any-return]
