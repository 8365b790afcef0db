"""Bounded LLM calls: timeout, retries with backoff, a per-query budget, concurrency, usage counting.

Every LLM stage talks to the host's LLM through an :class:`LLMSession` (one per query), never directly, so
that no query can hang the agent, loop forever, or spend more than its budget.

Example:
    >>> from toolrerank_plugins.testing import ScriptedLLM
    >>> session = LLMRuntime(RuntimeConfig(max_calls_per_query=2)).session(ScriptedLLM(["a", "b", "c"]))
    >>> session.complete("hi"), session.complete("hi")
    ('a', 'b')
    >>> session.usage.llm_calls
    2
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins.llm.base import LLM, LLMError, LLMTimeoutError, Message, as_messages

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Blocking calls that exceed their timeout are abandoned in this pool (a thread cannot be killed); a
# shared, bounded pool keeps a misbehaving LLM from spawning threads without limit.
_POOL_LOCK = threading.Lock()
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="toolrerank-llm")
        return _POOL


class BudgetExceededError(LLMError):
    """The query's LLM budget (calls or prompt tokens) is spent; not retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class RuntimeConfig(BaseModel):
    """Bounds on every LLM call a stage makes for one query.

    Token counts are estimated (about 4 characters per token) because the port returns text only; they are
    for budgets and reports, not billing.
    """

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(60.0, gt=0, description="wall-clock limit of one call attempt")
    max_retries: int = Field(2, ge=0, description="retries after the first attempt, on transient errors only")
    backoff_initial_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(8.0, ge=0)
    backoff_jitter: float = Field(0.25, ge=0, le=1, description="+/- fraction of random jitter on each wait")
    max_calls_per_query: int = Field(16, ge=1)
    max_prompt_tokens_per_query: int = Field(32_000, ge=1)
    max_concurrency: int = Field(4, ge=1, description="parallel calls for batches")


def estimate_tokens(text: str) -> int:
    """Rough token count (~4 characters per token, at least one per word-ish chunk)."""
    if not text:
        return 0
    return max(1, math.ceil(len(text) / 4))


def prompt_tokens(prompt: str | Sequence[Message]) -> int:
    return sum(estimate_tokens(m["content"]) + 4 for m in as_messages(prompt))


@dataclass
class LLMUsage:
    """Counters for one query (or summed over many). ``llm_time_ms`` includes retries and backoff waits."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_time_ms: float = 0.0
    retries: int = 0
    failures: int = 0
    timeouts: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["llm_time_ms"] = round(self.llm_time_ms, 3)
        return out

    def add(self, other: LLMUsage) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, LLMError):
        return exc.transient
    return isinstance(exc, (TimeoutError, ConnectionError, asyncio.TimeoutError))


@dataclass
class LLMRuntime:
    """Factory of per-query sessions sharing one config (and an injectable sleep, for tests)."""

    config: RuntimeConfig = field(default_factory=RuntimeConfig)
    sleep: Callable[[float], None] = time.sleep
    asleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def session(self, llm: LLM) -> LLMSession:
        return LLMSession(llm, self)

    def backoff(self, attempt: int) -> float:
        c = self.config
        base = min(c.backoff_max_s, c.backoff_initial_s * (2**attempt))
        return max(0.0, base * (1 + c.backoff_jitter * (2 * self.rng.random() - 1)))


class LLMSession:
    """The bounded LLM of one query: every call checks the budget, times out, retries and is counted."""

    def __init__(self, llm: LLM, runtime: LLMRuntime) -> None:
        self.llm = llm
        self.runtime = runtime
        self.config = runtime.config
        self.usage = LLMUsage()
        self._lock = threading.Lock()

    # -- budget ------------------------------------------------------------------------------------
    def _reserve(self, ptoks: int) -> None:
        c = self.config
        with self._lock:
            if self.usage.llm_calls >= c.max_calls_per_query:
                raise BudgetExceededError(
                    f"LLM call budget spent ({c.max_calls_per_query} calls per query); raise "
                    "runtime.max_calls_per_query or lower the stage's rounds/queries"
                )
            if self.usage.prompt_tokens + ptoks > c.max_prompt_tokens_per_query:
                raise BudgetExceededError(
                    f"LLM prompt-token budget spent ({self.usage.prompt_tokens} used + {ptoks} needed > "
                    f"{c.max_prompt_tokens_per_query}); raise runtime.max_prompt_tokens_per_query or show fewer tools"
                )
            self.usage.llm_calls += 1
            self.usage.prompt_tokens += ptoks

    def _done(self, text: str, started: float) -> str:
        if not isinstance(text, str):  # a port that returns None or a message object: treat as empty
            text = "" if text is None else str(text)
        with self._lock:
            self.usage.completion_tokens += estimate_tokens(text)
            self.usage.llm_time_ms += (time.perf_counter() - started) * 1000
        return text

    def _failed(self, exc: BaseException, started: float, attempt: int) -> bool:
        """Count a failed attempt; True when it should be retried."""
        with self._lock:
            self.usage.llm_time_ms += (time.perf_counter() - started) * 1000
            if isinstance(exc, (LLMTimeoutError, TimeoutError, asyncio.TimeoutError)):
                self.usage.timeouts += 1
            retry = _is_transient(exc) and attempt < self.config.max_retries
            if retry:
                self.usage.retries += 1
            else:
                self.usage.failures += 1
        return retry

    # -- calls ---------------------------------------------------------------------------------------
    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        """One bounded call. Raises :class:`LLMError` (or a subclass) once retries are spent."""
        ptoks = prompt_tokens(prompt)
        attempt = 0
        while True:
            self._reserve(ptoks)
            started = time.perf_counter()
            future = _pool().submit(
                self.llm.complete, prompt, temperature=temperature, max_tokens=max_tokens, stop=stop
            )
            try:
                text = future.result(timeout=self.config.timeout_s)
                return self._done(text, started)
            except concurrent.futures.TimeoutError:
                future.cancel()
                exc: BaseException = LLMTimeoutError(f"LLM call timed out after {self.config.timeout_s:g}s")
            except Exception as e:  # the host's LLM may raise anything; classify, never leak raw
                exc = e
            if not self._failed(exc, started, attempt):
                raise _as_llm_error(exc)
            wait = self.runtime.backoff(attempt)
            logger.debug("transient LLM error (%s); retrying in %.2fs", exc, wait)
            self.runtime.sleep(wait)
            with self._lock:
                self.usage.llm_time_ms += wait * 1000
            attempt += 1

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        """Async twin of :meth:`complete` (same bounds and counters)."""
        ptoks = prompt_tokens(prompt)
        attempt = 0
        acomplete = getattr(self.llm, "acomplete", None)
        while True:
            self._reserve(ptoks)
            started = time.perf_counter()
            try:
                if acomplete is not None:
                    coro = acomplete(prompt, temperature=temperature, max_tokens=max_tokens, stop=stop)
                else:
                    coro = asyncio.to_thread(
                        self.llm.complete, prompt, temperature=temperature, max_tokens=max_tokens, stop=stop
                    )
                text = await asyncio.wait_for(coro, timeout=self.config.timeout_s)
                return self._done(text, started)
            except asyncio.TimeoutError:
                exc: BaseException = LLMTimeoutError(f"LLM call timed out after {self.config.timeout_s:g}s")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                exc = e
            if not self._failed(exc, started, attempt):
                raise _as_llm_error(exc)
            wait = self.runtime.backoff(attempt)
            await self.runtime.asleep(wait)
            with self._lock:
                self.usage.llm_time_ms += wait * 1000
            attempt += 1

    def complete_many(self, prompts: Sequence[str | Sequence[Message]], **kwargs: Any) -> list[str | LLMError]:
        """Several calls with up to ``max_concurrency`` in flight; failures are returned, not raised."""

        def one(p: str | Sequence[Message]) -> str | LLMError:
            try:
                return self.complete(p, **kwargs)
            except LLMError as exc:
                return exc

        if len(prompts) <= 1 or self.config.max_concurrency == 1:
            return [one(p) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.config.max_concurrency) as ex:
            return list(ex.map(one, prompts))

    async def acomplete_many(self, prompts: Sequence[str | Sequence[Message]], **kwargs: Any) -> list[str | LLMError]:
        """Async twin of :meth:`complete_many`."""
        sem = asyncio.Semaphore(self.config.max_concurrency)

        async def one(p: str | Sequence[Message]) -> str | LLMError:
            async with sem:
                try:
                    return await self.acomplete(p, **kwargs)
                except LLMError as exc:
                    return exc

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def _as_llm_error(exc: BaseException) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    err = LLMError(f"LLM call failed: {type(exc).__name__}: {exc}", transient=_is_transient(exc))
    err.__cause__ = exc
    return err


def run_sync(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from sync code, also when called inside a running event loop (in a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    return _pool().submit(lambda: asyncio.run(coro_fn())).result()  # type: ignore[arg-type]
