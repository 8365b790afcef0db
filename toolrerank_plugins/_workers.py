"""Spare threads a search hands part of its first-stage work to: searching a multi-request message's requests.

The ``multi_intent`` stage asks the first stage for the message and for each of its requests. On one thread
that is about twice the encoding of plain hybrid (the requests repeat the message's words) and a first-stage
search per request; on a machine with a second core, the requests are encoded on a spare thread while the
calling thread encodes the message, and all their vectors are then searched in one call (docs/benchmarks.md,
"The default at hybrid's cost?"). The engine allows it
for the first-stage call of a search (:func:`spare_threads_allowed`, ``EngineConfig.parallel_requests``); a
first stage asks with :func:`side_by_side` (``FirstStage.search_side_by_side``), which says no outside such a
call.

There are as many spare threads as the process may use CPUs, less one (none on one CPU). A search that finds
them all busy (other searches of this process hold them) does the work itself, as before: spare threads never
queue work behind other searches. A forked child makes its own threads (a parent's do not exist there).
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = [
    "SpareThreads",
    "side_by_side",
    "sharing_cores",
    "spare_threads",
    "spare_threads_allowed",
    "threads_beside",
    "usable_cores",
    "usable_cpus",
]

T = TypeVar("T")
U = TypeVar("U")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


@functools.cache
def usable_cores() -> int | None:
    """The physical cores among the CPUs this process may run on (a core's hyperthreads counted once), where
    Linux's sysfs tells them; None where it does not (other systems). Read once per process."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not on Linux
        return None
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as package, open(f"{topology}/core_id") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:  # no topology (some containers): unknown
            return None
    return len(cores) or None


def threads_beside(alone: int) -> int:
    """The threads a native pool takes in one half of :func:`side_by_side` where alone it would take ``alone``.

    As many as alone when the process has a physical core for each thread of both halves (four cores and two
    threads each); else half of them, and at least one, so the two halves do not wait for each other's cores (two
    cores: one each). Where the physical cores are not known (:func:`usable_cores` None), half.

    Example:
        >>> threads_beside(1)
        1
    """
    cores = usable_cores()
    if cores is not None and 2 * alone <= cores:
        return max(1, alone)
    return max(1, alone // 2)


class SpareThreads:
    """At most ``size`` calls at once on threads of their own; :meth:`try_submit` returns None when none is free.

    Example:
        >>> spare = SpareThreads(1)
        >>> future = spare.try_submit(sum, [1, 2, 3])
        >>> future.result() if future is not None else sum([1, 2, 3])
        6
        >>> SpareThreads(0).try_submit(sum, [1]) is None
        True
    """

    def __init__(self, size: int) -> None:
        self.size = max(0, size)
        self._lock = threading.Lock()
        self._free = threading.BoundedSemaphore(self.size) if self.size else None
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():  # first use, or a forked child: new threads
                self._pool = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="toolrerank-spare")
                self._free = threading.BoundedSemaphore(self.size)
                self._pid = os.getpid()
            return self._pool

    def try_submit(self, fn: Callable[..., T], *args: Any) -> Future[T] | None:
        """``fn(*args)`` on a spare thread, in a copy of the caller's context (its context variables), or None
        when every spare thread is busy."""
        if not self.size:
            return None
        pool = self._executor()
        free = self._free
        assert free is not None  # noqa: S101 - set with the pool
        if not free.acquire(blocking=False):
            return None
        try:
            future = pool.submit(contextvars.copy_context().run, fn, *args)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            free.release()
            return None
        future.add_done_callback(lambda _f: free.release())
        return future


_SPARE: SpareThreads | None = None
_SPARE_LOCK = threading.Lock()


def _forget_after_fork() -> None:  # a forked child: the parent's threads and locks are not its own
    global _SPARE, _SPARE_LOCK
    _SPARE, _SPARE_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_after_fork)


def spare_threads() -> SpareThreads:
    """The process's spare threads (:func:`usable_cpus` less one), made on first use."""
    global _SPARE
    with _SPARE_LOCK:
        if _SPARE is None:
            _SPARE = SpareThreads(usable_cpus() - 1)
        return _SPARE


_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("toolrerank_spare_threads", default=False)
_SHARING: contextvars.ContextVar[bool] = contextvars.ContextVar("toolrerank_sharing_cores", default=False)


@contextmanager
def spare_threads_allowed(allowed: bool = True) -> Iterator[None]:
    """Lets :func:`side_by_side` use a spare thread in the block (when ``allowed``)."""
    token = _ALLOWED.set(allowed)
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def side_by_side(mine: Callable[[], T], other: Callable[[], U]) -> tuple[T, U] | None:
    """``other()`` on a spare thread while this thread runs ``mine()``, when the caller is inside
    :func:`spare_threads_allowed` and a spare thread is free; else None, and neither ran (the caller then does the
    work itself). An error of ``mine`` leaves only once ``other`` has ended; an error of ``other`` is raised here.

    Example:
        >>> with spare_threads_allowed():
        ...     both = side_by_side(lambda: 1, lambda: 2)
        >>> both in (None, (1, 2))  # None on a single CPU
        True
    """
    if not _ALLOWED.get():
        return None
    token = _SHARING.set(True)  # before the spare thread copies the context: both threads see it
    try:
        aside = spare_threads().try_submit(other)
        if aside is None:
            return None
        try:
            here = mine()
        except BaseException:
            futures_wait([aside])
            raise
        return here, aside.result()
    finally:
        _SHARING.reset(token)


def sharing_cores() -> bool:
    """Whether this thread runs one half of :func:`side_by_side`: native thread pools (torch's intra-op
    threads, faiss's OpenMP) should then take :func:`threads_beside` their count alone, so the two halves do not
    wait for each other's cores."""
    return _SHARING.get()
