"""Record/replay cache of LLM answers on disk, keyed by a hash of the request, so runs repeat for free.

One JSON file per request under ``<dir>/<key[:2]>/<key>.json`` (written atomically, through the library's one
atomic write helper: an OS failure is a ``SaveError`` naming the file, and no temporary is left), holding the
request and the answer, so a cache can be read, diffed and shared. Modes:

- ``"auto"``: answer from the cache when present, else call the LLM and record.
- ``"record"``: always call the LLM and (over)write the cache.
- ``"replay"``: never call the LLM; a missing entry raises :class:`CacheMissError` (not retried).

Sampled requests (``temperature > 0``) asked several times in one run are different samples: the n-th
identical sampled request of a :class:`CachedLLM` gets its own entry (``occurrence`` n), so replaying
rejection sampling gives back the same N drafts, not N copies of the first.

Example:
    >>> import tempfile
    >>> from toolrerank_plugins.testing import ScriptedLLM
    >>> d = tempfile.mkdtemp()
    >>> CachedLLM(ScriptedLLM(["hello"]), d).complete("hi")
    'hello'
    >>> CachedLLM(ScriptedLLM([]), d, mode="replay").complete("hi")
    'hello'
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins.llm.base import LLM, LLMError, Message, as_messages

CacheMode = Literal["auto", "record", "replay"]


class CacheMissError(LLMError):
    """Replay mode found no recorded answer for a request."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


def request_key(
    messages: Sequence[Message],
    *,
    temperature: float | None,
    max_tokens: int | None,
    stop: Sequence[str] | None,
    namespace: str = "",
    occurrence: int = 0,
) -> tuple[str, dict[str, Any]]:
    """sha256 of the canonical JSON of a request (never Python ``hash()``: it is salted per process)."""
    payload = {
        "namespace": namespace,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "temperature": temperature,
        "max_tokens": max_tokens,
        "stop": list(stop) if stop else None,
        "occurrence": occurrence,
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest(), payload


class CachedLLM:
    """Wrap any LLM with a disk cache (see the module docstring).

    Args:
        llm: the LLM answering misses (unused in replay mode).
        path: cache directory (created).
        mode: ``"auto"``, ``"record"`` or ``"replay"``.
        namespace: part of every key — put the model name here so two models never share answers.
    """

    def __init__(self, llm: LLM | None, path: str | Path, *, mode: CacheMode = "auto", namespace: str = "") -> None:
        if mode not in ("auto", "record", "replay"):
            raise ValueError(f"cache mode must be 'auto', 'record' or 'replay', got {mode!r}")
        if llm is None and mode != "replay":
            raise ValueError("CachedLLM needs an llm unless mode='replay'")
        self.llm = llm
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self.namespace = namespace
        self.hits = 0
        self.misses = 0
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def caller_loop(self) -> bool:
        """Whether async calls must run on the caller's event loop: the wrapped LLM's answer (see runtime)."""
        return getattr(self.llm, "caller_loop", False) is True

    def _file(self, key: str) -> Path:
        return self.path / key[:2] / f"{key}.json"

    def _key(
        self,
        prompt: str | Sequence[Message],
        temperature: float | None,
        max_tokens: int | None,
        stop: Sequence[str] | None,
    ) -> tuple[str, dict[str, Any]]:
        msgs = as_messages(prompt)
        occurrence = 0
        if temperature:
            base, _ = request_key(
                msgs, temperature=temperature, max_tokens=max_tokens, stop=stop, namespace=self.namespace
            )
            with self._lock:
                occurrence = self._seen[base]
                self._seen[base] += 1
        return request_key(
            msgs,
            temperature=temperature,
            max_tokens=max_tokens,
            stop=stop,
            namespace=self.namespace,
            occurrence=occurrence,
        )

    def _lookup(self, key: str) -> str | None:
        if self.mode == "record":
            return None
        f = self._file(key)
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError):  # a torn or edited file: treat as a miss, it will be rewritten
            return None
        answer = data.get("response") if isinstance(data, dict) else None
        return answer if isinstance(answer, str) else None

    def _store(self, key: str, request: dict[str, Any], response: str) -> None:
        """Write one entry through the atomic write helper (temporary file, fsync, ``os.replace``, removed on
        any error); an OS failure is a :class:`~toolrerank_plugins.errors.SaveError` naming the file."""
        f = self._file(key)
        f.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"request": request, "response": response}, ensure_ascii=False, indent=1)
        write_atomic(f, text)

    def _hit_or_miss(self, key: str) -> str | None:
        answer = self._lookup(key)
        with self._lock:
            if answer is not None:
                self.hits += 1
            else:
                self.misses += 1
        if answer is None and self.mode == "replay":
            raise CacheMissError(
                f"no recorded LLM answer for request {key[:12]} in {self.path}; record it first "
                "(mode='auto' or 'record' with a real LLM)"
            )
        return answer

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        key, request = self._key(prompt, temperature, max_tokens, stop)
        answer = self._hit_or_miss(key)
        if answer is not None:
            return answer
        assert self.llm is not None
        text = self.llm.complete(prompt, temperature=temperature, max_tokens=max_tokens, stop=stop)
        self._store(key, request, text)
        return text

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        key, request = self._key(prompt, temperature, max_tokens, stop)
        answer = self._hit_or_miss(key)
        if answer is not None:
            return answer
        assert self.llm is not None
        text = await self.llm.acomplete(prompt, temperature=temperature, max_tokens=max_tokens, stop=stop)
        self._store(key, request, text)
        return text
