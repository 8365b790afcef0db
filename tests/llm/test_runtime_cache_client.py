from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from toolrerank_plugins.llm.base import LLMError, LLMTimeoutError
from toolrerank_plugins.llm.cache import CachedLLM, CacheMissError
from toolrerank_plugins.llm.openai_compat import OpenAICompatLLM
from toolrerank_plugins.llm.runtime import BudgetExceededError, LLMRuntime, RuntimeConfig
from toolrerank_plugins.testing import ScriptedLLM
from toolrerank_plugins.testing.llm import Delay


def _runtime(**kw: object) -> tuple[LLMRuntime, list[float]]:
    waits: list[float] = []

    async def asleep(s: float) -> None:
        waits.append(s)

    return LLMRuntime(RuntimeConfig(**kw), sleep=waits.append, asleep=asleep), waits  # type: ignore[arg-type]


# -- runtime ------------------------------------------------------------------------------------------
def test_retries_transient_errors_with_growing_backoff() -> None:
    rt, waits = _runtime(max_retries=3, backoff_initial_s=1.0, backoff_jitter=0.0)
    llm = ScriptedLLM([LLMError("429", transient=True), ConnectionError("reset"), "ok"])
    s = rt.session(llm)
    assert s.complete("q") == "ok"
    assert waits == [1.0, 2.0]
    assert s.usage.llm_calls == 3 and s.usage.retries == 2 and s.usage.failures == 0


def test_non_transient_errors_are_not_retried() -> None:
    rt, waits = _runtime(max_retries=3)
    s = rt.session(ScriptedLLM([ValueError("bad request"), "never"]))
    with pytest.raises(LLMError, match="ValueError"):
        s.complete("q")
    assert waits == [] and s.usage.llm_calls == 1 and s.usage.failures == 1


def test_timeout_is_enforced_on_a_hanging_llm() -> None:
    rt, _ = _runtime(timeout_s=0.2, max_retries=1)
    s = rt.session(ScriptedLLM([Delay(5.0, "late"), Delay(5.0, "late")]))
    t = time.perf_counter()
    with pytest.raises(LLMTimeoutError):
        s.complete("q")
    assert time.perf_counter() - t < 2.0
    assert s.usage.timeouts == 2 and s.usage.llm_calls == 2


def test_async_timeout_and_retry() -> None:
    rt, waits = _runtime(timeout_s=0.1, max_retries=1, backoff_jitter=0.0, backoff_initial_s=0.5)
    s = rt.session(ScriptedLLM([Delay(3.0, "late"), "ok"]))
    assert asyncio.run(s.acomplete("q")) == "ok"
    assert waits == [0.5] and s.usage.timeouts == 1


def test_call_budget() -> None:
    rt, _ = _runtime(max_calls_per_query=2)
    s = rt.session(ScriptedLLM(default="x"))
    s.complete("a")
    s.complete("b")
    with pytest.raises(BudgetExceededError, match="max_calls_per_query"):
        s.complete("c")


def test_prompt_token_budget() -> None:
    rt, _ = _runtime(max_prompt_tokens_per_query=50)
    s = rt.session(ScriptedLLM(default="x"))
    with pytest.raises(BudgetExceededError, match="prompt-token"):
        s.complete("word " * 100)
    assert s.usage.llm_calls == 0


def test_usage_counts_tokens_and_time() -> None:
    rt, _ = _runtime()
    s = rt.session(ScriptedLLM(["a" * 40], latency_s=0.05))
    s.complete("b" * 400)
    u = s.usage.to_dict()
    assert u["llm_calls"] == 1 and u["prompt_tokens"] >= 100 and u["completion_tokens"] == 10
    assert u["llm_time_ms"] >= 40


def test_batches_run_concurrently_and_keep_order() -> None:
    rt, _ = _runtime(max_concurrency=4)
    llm = ScriptedLLM(rules=[(r"p(\d)", lambda t: "ans" + t[-1])], latency_s=0.3)
    s = rt.session(llm)
    t = time.perf_counter()
    out = s.complete_many([f"p{i}" for i in range(4)])
    assert time.perf_counter() - t < 1.0  # four 0.3 s calls in parallel, not 1.2 s in series
    assert out == ["ans0", "ans1", "ans2", "ans3"]
    t = time.perf_counter()
    out2 = asyncio.run(s.acomplete_many([f"p{i}" for i in range(4)]))
    assert time.perf_counter() - t < 1.0 and out2 == out


def test_batch_failures_are_returned_not_raised() -> None:
    # one call at a time: the scripted answers are handed out in call order, and concurrent calls (one thread
    # each) may reach the LLM in either order
    rt, _ = _runtime(max_retries=0, max_concurrency=1)
    out = rt.session(ScriptedLLM(["ok", RuntimeError("x")])).complete_many(["a", "b"])
    assert out[0] == "ok" and isinstance(out[1], LLMError)


# -- cache ----------------------------------------------------------------------------------------------
def test_cache_record_then_replay(tmp_path: Path) -> None:
    live = ScriptedLLM(["one", "two"])
    c = CachedLLM(live, tmp_path)
    assert c.complete("hello", temperature=0.0) == "one"
    assert c.complete("hello", temperature=0.0) == "one"  # hit: the LLM is not called again
    assert len(live.calls) == 1 and c.hits == 1
    replay = CachedLLM(None, tmp_path, mode="replay")
    assert replay.complete("hello", temperature=0.0) == "one"
    with pytest.raises(CacheMissError):
        replay.complete("other")
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["response"] == "one"


def test_cache_keeps_distinct_samples_and_namespaces(tmp_path: Path) -> None:
    c = CachedLLM(ScriptedLLM(["s1", "s2", "s3"]), tmp_path, namespace="m1")
    assert [c.complete("p", temperature=1.0) for _ in range(2)] == ["s1", "s2"]
    r = CachedLLM(None, tmp_path, mode="replay", namespace="m1")
    assert [r.complete("p", temperature=1.0) for _ in range(2)] == ["s1", "s2"]
    with pytest.raises(CacheMissError):
        CachedLLM(None, tmp_path, mode="replay", namespace="m2").complete("p", temperature=1.0)


def test_cache_record_mode_overwrites_and_async(tmp_path: Path) -> None:
    CachedLLM(ScriptedLLM(["old"]), tmp_path).complete("p")
    assert asyncio.run(CachedLLM(ScriptedLLM(["new"]), tmp_path, mode="record").acomplete("p")) == "new"
    assert CachedLLM(None, tmp_path, mode="replay").complete("p") == "new"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "[" * 100_000, '"just a string"', "\udcff"])
def test_cache_torn_file_is_a_miss(tmp_path: Path, text: str) -> None:
    """A torn or edited entry is a miss, answered again: not JSON, JSON that is not an object (was an
    AttributeError), nesting past the recursion limit (was a RecursionError), not UTF-8."""
    CachedLLM(ScriptedLLM(["a"]), tmp_path).complete("p")
    next(tmp_path.rglob("*.json")).write_bytes(text.encode("utf-8", "surrogateescape"))
    assert CachedLLM(ScriptedLLM(["b"]), tmp_path).complete("p") == "b"


# -- OpenAI-compatible client (no sockets: an injected transport) -----------------------------------------
def test_openai_compat_request_and_response() -> None:
    seen: dict[str, object] = {}

    def transport(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        seen.update(url=url, body=json.loads(body), headers=headers, timeout=timeout)
        return 200, json.dumps({"choices": [{"message": {"content": "hello"}}], "usage": {"prompt_tokens": 7}}).encode()

    llm = OpenAICompatLLM("http://localhost:11434/v1/", model="m", api_key="k", transport=transport, timeout_s=5)
    assert llm.complete("hi", temperature=0.2, max_tokens=10, stop=["\n"]) == "hello"
    assert seen["url"] == "http://localhost:11434/v1/chat/completions"
    body = seen["body"]
    assert isinstance(body, dict)
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["max_tokens"] == 10
    assert body["temperature"] == 0.2 and body["stop"] == ["\n"]
    assert seen["headers"]["Authorization"] == "Bearer k"  # type: ignore[index]
    assert llm.last_usage == {"prompt_tokens": 7}
    assert asyncio.run(llm.acomplete("hi")) == "hello"


@pytest.mark.parametrize(("status", "transient"), [(429, True), (503, True), (400, False), (404, False)])
def test_openai_compat_http_errors(status: int, transient: bool) -> None:
    llm = OpenAICompatLLM("http://x/v1", model="m", transport=lambda *a: (status, b"nope"))
    with pytest.raises(LLMError) as info:
        llm.complete("hi")
    assert info.value.transient is transient and str(status) in str(info.value)


def test_openai_compat_bad_payload_timeout_and_unreachable() -> None:
    with pytest.raises(LLMError, match="not an OpenAI"):
        OpenAICompatLLM("http://x/v1", model="m", transport=lambda *a: (200, b"<html>")).complete("hi")

    def slow(*a: object) -> tuple[int, bytes]:
        raise TimeoutError("slow")

    with pytest.raises(LLMTimeoutError):
        OpenAICompatLLM("http://x/v1", model="m", transport=slow).complete("hi")

    def down(*a: object) -> tuple[int, bytes]:
        raise ConnectionRefusedError("refused")

    with pytest.raises(LLMError, match="is it running") as info:
        OpenAICompatLLM("http://x/v1", model="m", transport=down).complete("hi")
    assert info.value.transient
