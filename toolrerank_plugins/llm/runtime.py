"""Bounded LLM calls: timeout, retries with backoff, a per-query budget, concurrency, usage counting.

Every LLM stage talks to the host's LLM through an :class:`LLMSession` (one per query), never directly, so
that no query can hang the agent, loop forever, or spend more than its budget.

How the time bound holds (``timeout_s`` per attempt, sync and async):

- **sync** ``complete``: each call runs in its own daemon thread; the caller waits at most ``timeout_s``. A
  call that does not return in time is *abandoned* (a thread cannot be killed): it keeps its own thread, so
  it never occupies a slot that a later call needs. Abandoned calls still running are counted per LLM object
  (:func:`abandoned_calls`): from ``max_abandoned_calls`` of one LLM on, new calls *to that LLM* are refused
  at once with an :class:`LLMError` naming it instead of piling up threads (a hanging LLM, not a slow one),
  while other LLMs are still called; from ``max_abandoned_calls_total`` in the process on, every new call is
  refused (the bound on threads, whichever LLMs hang).
- **async** ``acomplete``: by default (``async_isolation="auto"``) the port's coroutine runs on a private
  event loop in a worker thread (one per LLM object, kept across calls so that clients bound to a loop keep
  working), and the caller awaits it with the deadline: an LLM that blocks its loop (``time.sleep`` in an
  ``async def``) or ignores cancellation cannot hold the caller past ``timeout_s``. A worker whose timed-out
  call does not end on cancellation is retired and a fresh one serves later calls. Ports whose async client
  belongs to the caller's loop (the LangChain/LlamaIndex wrappers: ``caller_loop = True``) run there instead
  (a task abandoned on timeout, never awaited); ``async_isolation`` forces either way.
- Anything the LLM raises, ``BaseException`` included (an ``asyncio.CancelledError`` it raises itself, a
  ``GeneratorExit``), becomes an :class:`LLMError`, except ``KeyboardInterrupt`` and ``SystemExit``; a real
  cancellation of the caller propagates.

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
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.llm.base import LLM, LLMError, LLMTimeoutError, Message, as_messages

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: After a timed-out call is cancelled, how long to wait for it to end before counting it abandoned.
_CANCEL_GRACE_S = 0.05


# -- abandoned calls (per LLM, and in total) -----------------------------------------------------------
def llm_label(llm: object) -> str:
    """How errors name an LLM: the names it is registered under, and its repr (or class and address)."""
    from toolrerank_plugins.llm.registry import registered_names

    try:
        own_repr = type(llm).__repr__ is not object.__repr__
        text = repr(llm) if own_repr else f"{type(llm).__name__} at 0x{id(llm):x}"
    except Exception:  # noqa: BLE001 - a label must never fail
        text = f"{type(llm).__name__} at 0x{id(llm):x}"
    text = text if len(text) <= 100 else text[:97] + "..."
    names = registered_names(llm)
    return f"LLM {', '.join(repr(n) for n in names)} ({text})" if names else f"LLM {text}"


class _Abandoned:
    """How many timed-out LLM calls are still running (threads or tasks we could not stop), per LLM object.

    An LLM is keyed by ``id()``: a running abandoned call holds its LLM, so the id stays its own while the
    count is above zero, and the entry goes when the count falls to zero.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0
        self._per_llm: dict[int, int] = {}
        self._labels: dict[int, str] = {}

    def add(self, key: int, label: str) -> None:
        with self._lock:
            self.total += 1
            self._per_llm[key] = self._per_llm.get(key, 0) + 1
            self._labels[key] = label

    def remove(self, key: int) -> None:
        with self._lock:
            self.total -= 1
            left = self._per_llm.get(key, 0) - 1
            if left > 0:
                self._per_llm[key] = left
            else:
                self._per_llm.pop(key, None)
                self._labels.pop(key, None)

    def of(self, key: int) -> int:
        return self._per_llm.get(key, 0)

    def worst(self, n: int = 3) -> list[tuple[str, int]]:
        """The ``n`` LLMs with the most abandoned calls still running, with their counts."""
        with self._lock:
            top = sorted(self._per_llm.items(), key=lambda kv: -kv[1])[:n]
            return [(self._labels.get(k, "an LLM"), c) for k, c in top]


_ABANDONED = _Abandoned()


def abandoned_calls(llm: object | None = None) -> int:
    """Timed-out LLM calls still running (they end when the LLM returns): of ``llm``, or of the whole process."""
    return _ABANDONED.total if llm is None else _ABANDONED.of(id(llm))


class _Call:
    """One attempt's bookkeeping: finished or not, abandoned or not (a lock makes the two agree)."""

    def __init__(self, llm: object | None = None, worker: _LoopWorker | None = None) -> None:
        self._lock = threading.Lock()
        self.finished = threading.Event()
        self.abandoned = False
        self.llm = llm
        self.worker = worker

    def finish(self) -> None:
        with self._lock:
            self.finished.set()
            if self.abandoned:
                _ABANDONED.remove(id(self.llm))
                if self.worker is not None:
                    self.worker.unstuck()

    def abandon(self) -> bool:
        """Count the call as abandoned unless it already ended; True when it was abandoned."""
        with self._lock:
            if self.finished.is_set():
                return False
            self.abandoned = True
            _ABANDONED.add(id(self.llm), llm_label(self.llm))
            if self.worker is not None:
                self.worker.stuck_call()
            return True


def _in_thread(fn: Callable[[], T], call: _Call) -> concurrent.futures.Future[T]:
    """Run ``fn`` in a fresh daemon thread; its result or any exception lands in the returned future."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        try:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # delivered to the caller, who classifies it
                    fut.set_exception(exc)
        finally:
            call.finish()

    threading.Thread(target=target, name="toolrerank-llm-call", daemon=True).start()
    return fut


@dataclass(frozen=True)
class _Fatal:
    """``KeyboardInterrupt`` / ``SystemExit`` raised by an LLM on a private loop, re-raised by the caller."""

    exc: BaseException


class _LoopWorker:
    """A private event loop in a daemon thread, for one LLM's async calls (see the module docstring)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.retired = False
        self.stuck = 0  # abandoned calls still running on this loop
        self._lock = threading.RLock()
        self.thread = threading.Thread(target=self._run, name="toolrerank-llm-loop", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(self, factory: Callable[[], Awaitable[T]], call: _Call) -> concurrent.futures.Future[Any]:
        async def runner() -> Any:
            try:
                return await factory()
            except (KeyboardInterrupt, SystemExit) as exc:
                # raised out of a task these would stop this loop; hand them to the caller instead
                return _Fatal(exc)
            finally:
                call.finish()

        return asyncio.run_coroutine_threadsafe(runner(), self.loop)

    def stuck_call(self) -> None:
        """A call on this loop outlived its cancellation: serve later calls from a fresh loop."""
        with self._lock:
            self.stuck += 1
            self.retired = True

    def unstuck(self) -> None:
        """A stuck call ended; a retired loop with none left stops (its thread exits)."""
        with self._lock:
            self.stuck -= 1
            stop = self.retired and self.stuck <= 0
        if stop:
            self._stop()

    def close(self) -> None:
        with self._lock:
            self.retired = True
            stop = self.stuck <= 0
        if stop:
            self._stop()

    def _stop(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # the loop is closed already
            pass


# Never held while a thread starts or a finalizer could need it: garbage collection may run a finalizer
# (a worker's close) in any thread at any allocation, including a thread that is just starting.
_WORKERS_LOCK = threading.Lock()
_WORKERS: dict[int, _LoopWorker] = {}


def _worker_for(llm: object) -> _LoopWorker:
    """The live private loop of this LLM object (a new one after a retirement or on first use)."""
    key = id(llm)
    with _WORKERS_LOCK:
        w = _WORKERS.get(key)
        if w is not None and not w.retired:
            return w
        for k in [k for k, x in _WORKERS.items() if x.retired]:  # closed or retired: forget them
            del _WORKERS[k]
        w = _LoopWorker()
        _WORKERS[key] = w
    w.start()  # outside the lock (see above); calls submitted meanwhile wait in the loop's queue
    try:
        weakref.finalize(llm, w.close)
    except TypeError:  # not weak-referenceable: the worker lives as long as the process
        pass
    return w


def _task_ended(task: asyncio.Future[Any], call: _Call) -> None:
    call.finish()
    if not task.cancelled():
        task.exception()  # retrieved, so an abandoned task's error is not logged as "never retrieved"


def _on_caller_loop(llm: object, mode: str) -> bool:
    if mode == "caller_loop":
        return True
    if mode == "thread":
        return False
    return getattr(llm, "caller_loop", False) is True


class BudgetExceededError(LLMError):
    """The query's LLM budget (calls or prompt tokens) is spent; not retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class RuntimeConfig(ConfigModel):
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
    max_abandoned_calls: int = Field(
        32,
        ge=1,
        description="timed-out calls to one LLM still running from which new calls to that LLM are refused "
        "(other LLMs are still called)",
    )
    max_abandoned_calls_total: int = Field(
        256,
        ge=1,
        description="timed-out calls still running in the process, whichever LLMs, from which every new call is "
        "refused (the bound on abandoned threads)",
    )
    async_isolation: Literal["auto", "thread", "caller_loop"] = Field(
        "auto",
        description="where async calls run: thread (a private loop per LLM; the deadline always holds), "
        "caller_loop (the caller's loop; an LLM that blocks it blocks the caller), auto (caller_loop for ports "
        "with caller_loop = True, else thread)",
    )


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
    abandoned: int = 0

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


def _reraise_fatal(exc: BaseException) -> None:
    """``KeyboardInterrupt`` and ``SystemExit`` are never an LLM failure to fall back from."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc


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

    # -- one attempt -----------------------------------------------------------------------------------
    def _refuse_if_hung(self) -> None:
        c = self.config
        mine = _ABANDONED.of(id(self.llm))
        if mine >= c.max_abandoned_calls:
            message = (
                f"{mine} timed-out calls to {llm_label(self.llm)} are still running "
                f"(runtime.max_abandoned_calls={c.max_abandoned_calls}); not calling it again: it is hanging. "
                "They end when it returns; other LLMs are still called."
            )
        elif _ABANDONED.total >= c.max_abandoned_calls_total:
            worst = "; ".join(f"{n} to {label}" for label, n in _ABANDONED.worst())
            message = (
                f"{_ABANDONED.total} timed-out LLM calls are still running in this process "
                f"(runtime.max_abandoned_calls_total={c.max_abandoned_calls_total}); not starting another. "
                f"Hanging: {worst}. They end when the LLM returns."
            )
        else:
            return
        with self._lock:
            self.usage.failures += 1
        raise LLMError(message)

    def _timed_out(self, call: _Call) -> LLMTimeoutError:
        if call.abandon():
            with self._lock:
                self.usage.abandoned += 1
        return LLMTimeoutError(f"LLM call timed out after {self.config.timeout_s:g}s")

    def _attempt(self, prompt: str | Sequence[Message], kwargs: dict[str, Any]) -> str:
        """One sync attempt in its own thread, bounded by ``timeout_s``; raises what the LLM raised."""
        call = _Call(self.llm)
        fut = _in_thread(lambda: self.llm.complete(prompt, **kwargs), call)
        try:
            return fut.result(timeout=self.config.timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise self._timed_out(call) from None

    async def _aattempt(self, prompt: str | Sequence[Message], kwargs: dict[str, Any]) -> str:
        """One async attempt, bounded by ``timeout_s`` whatever the LLM does; raises what the LLM raised."""
        call = _Call(self.llm)
        acomplete = getattr(self.llm, "acomplete", None)
        if acomplete is None:  # a sync-only port: its own thread, not the loop's shared executor
            cfut: concurrent.futures.Future[Any] = _in_thread(lambda: self.llm.complete(prompt, **kwargs), call)
            fut: asyncio.Future[Any] = asyncio.wrap_future(cfut)
        elif _on_caller_loop(self.llm, self.config.async_isolation):
            fut = asyncio.ensure_future(acomplete(prompt, **kwargs))
            fut.add_done_callback(lambda f: _task_ended(f, call))
        else:
            call.worker = worker = _worker_for(self.llm)
            cfut = worker.submit(lambda: acomplete(prompt, **kwargs), call)
            fut = asyncio.wrap_future(cfut)
        try:
            # asyncio.wait neither raises what the LLM raised nor waits for a cancelled call to end; it
            # raises CancelledError only when *this* task is cancelled.
            done, _ = await asyncio.wait({fut}, timeout=self.config.timeout_s)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        if not done:
            fut.cancel()
            for _ in range(int(_CANCEL_GRACE_S / 0.005)):  # a cooperative call ends on cancellation
                if call.finished.is_set():
                    break
                await asyncio.sleep(0.005)
            raise self._timed_out(call)
        if fut.cancelled():  # the LLM raised CancelledError itself; the caller was not cancelled
            raise LLMError("the LLM raised asyncio.CancelledError although the caller was not cancelled")
        exc = fut.exception()
        if exc is not None:
            raise exc
        out = fut.result()
        if isinstance(out, _Fatal):
            raise out.exc
        return out  # type: ignore[no-any-return]

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
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens, "stop": stop}
        attempt = 0
        while True:
            self._refuse_if_hung()
            self._reserve(ptoks)
            started = time.perf_counter()
            try:
                return self._done(self._attempt(prompt, kwargs), started)
            except BaseException as e:  # the host's LLM may raise anything; classify, never leak raw
                _reraise_fatal(e)
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
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens, "stop": stop}
        attempt = 0
        while True:
            self._refuse_if_hung()
            self._reserve(ptoks)
            started = time.perf_counter()
            try:
                return self._done(await self._aattempt(prompt, kwargs), started)
            except asyncio.CancelledError:
                # _aattempt raises CancelledError only for a real cancellation of this task
                raise
            except BaseException as e:
                _reraise_fatal(e)
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

    async def main() -> T:
        return await coro_fn()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    return _in_thread(lambda: asyncio.run(main()), _Call()).result()
