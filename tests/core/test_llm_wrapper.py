"""The one LLM-port wrapper the adapters' ``llms.py`` build on (toolrerank_plugins.llm.wrapper)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from toolrerank_plugins.llm.base import LLM, LLMError, LLMTimeoutError, Message
from toolrerank_plugins.llm.wrapper import LLMWrapper, convert_messages

_ROLES = {"system": lambda c: ("S", c), "user": lambda c: ("U", c), "assistant": lambda c: ("A", c)}


class FakeModel:
    """A framework model: records calls, replies with (text, prompt tokens, completion tokens) or raises."""

    def __init__(self, replies: Sequence[Any]) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[list[Any], dict[str, Any], bool]] = []

    def reply(self, messages: list[Any], options: dict[str, Any], asynchronous: bool) -> Any:
        self.calls.append((messages, options, asynchronous))
        r = self.replies.pop(0)
        if isinstance(r, BaseException):
            raise r
        return r


class Wrapped(LLMWrapper[tuple[str, str], tuple[str, int, int]]):
    label = "fake model"

    def __init__(self, model: FakeModel) -> None:
        super().__init__(model)
        self.model = model

    def _messages(self, prompt: str | Sequence[Message]) -> list[tuple[str, str]]:
        return convert_messages(prompt, _ROLES)

    def _call(self, messages: list[tuple[str, str]], options: dict[str, Any]) -> tuple[str, int, int]:
        return self.model.reply(messages, options, False)  # type: ignore[no-any-return]

    async def _acall(self, messages: list[tuple[str, str]], options: dict[str, Any]) -> tuple[str, int, int]:
        return self.model.reply(messages, options, True)  # type: ignore[no-any-return]

    def _text(self, reply: tuple[str, int, int]) -> str:
        return reply[0]

    def _tokens(self, reply: tuple[str, int, int]) -> tuple[int, int]:
        return reply[1], reply[2]


def test_convert_messages_by_role() -> None:
    assert convert_messages("hi", _ROLES) == [("U", "hi")]
    msgs: list[Message] = [{"role": "system", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert convert_messages(msgs, _ROLES) == [("S", "a"), ("A", "b")]
    with pytest.raises(ValueError, match=r"unknown message role 'robot'; use one of \['assistant', 'system', 'user'\]"):
        convert_messages([{"role": "robot", "content": "x"}], _ROLES)


def test_complete_passes_only_the_options_set_and_counts_usage() -> None:
    model = FakeModel([("short", 7, 2), ("again", 1, 1)])
    llm = Wrapped(model)
    assert isinstance(llm, LLM)
    assert (
        llm.complete(
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], temperature=0.0, stop=["\n"]
        )
        == "short"
    )
    assert model.calls[0] == ([("S", "be brief"), ("U", "hi")], {"temperature": 0.0, "stop": ["\n"]}, False)
    assert asyncio.run(llm.acomplete("q", max_tokens=5)) == "again"
    assert model.calls[1] == ([("U", "q")], {"max_tokens": 5}, True)
    assert llm.usage == {"llm_calls": 2, "prompt_tokens": 8, "completion_tokens": 3}
    assert repr(llm) == "Wrapped(FakeModel)"


@pytest.mark.parametrize("asynchronous", [False, True])
def test_errors_name_the_model(asynchronous: bool) -> None:
    llm = Wrapped(FakeModel([RuntimeError("rate limited"), TimeoutError("slow"), asyncio.TimeoutError()]))

    def call(prompt: Any) -> str:
        return asyncio.run(llm.acomplete(prompt)) if asynchronous else llm.complete(prompt)

    with pytest.raises(LLMError, match="fake model FakeModel failed: rate limited") as failed:
        call("x")
    assert not isinstance(failed.value, LLMTimeoutError) and isinstance(failed.value.__cause__, RuntimeError)
    with pytest.raises(LLMTimeoutError, match="fake model FakeModel timed out") as timed_out:
        call("x")
    assert timed_out.value.transient
    with pytest.raises(LLMTimeoutError):
        call("x")
    with pytest.raises(ValueError, match="unknown message role"):  # a caller's bug is not an LLM error
        call([{"role": "robot", "content": "x"}])
    assert llm.usage["llm_calls"] == 0 and len(llm.model.calls) == 3


def test_default_token_counts_are_zero() -> None:
    class NoUsage(Wrapped):
        def _tokens(self, reply: tuple[str, int, int]) -> tuple[int, int]:
            return LLMWrapper._tokens(self, reply)

    llm = NoUsage(FakeModel([("a", 9, 9)]))
    llm.complete("q")
    assert llm.usage == {"llm_calls": 1, "prompt_tokens": 0, "completion_tokens": 0}
