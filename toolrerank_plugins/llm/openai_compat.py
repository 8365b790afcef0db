"""A minimal client for OpenAI-compatible chat servers (Ollama, vLLM, llama.cpp, LM Studio), stdlib only.

Meant for local servers: ``OpenAICompatLLM("http://localhost:11434/v1", model="llama3.1")``. Errors map onto
the port: HTTP 408/409/429/5xx and connection failures are transient (retried by the runtime), other 4xx
are not, socket timeouts are :class:`LLMTimeoutError`. Tests inject ``transport`` and never open sockets.

Example:
    >>> def fake_transport(url, body, headers, timeout):
    ...     return 200, b'{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3}}'
    >>> llm = OpenAICompatLLM("http://localhost:8000/v1", model="m", transport=fake_transport)
    >>> llm.complete("hello"), llm.last_usage
    ('hi', {'prompt_tokens': 3})
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from toolrerank_plugins.llm.base import LLMError, LLMTimeoutError, Message, as_messages

#: ``(url, body, headers, timeout) -> (status, response bytes)``
Transport = Callable[[str, bytes, dict[str, str], float], tuple[int, bytes]]

_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def _urllib_transport(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URL given by the user
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read() or b""


class OpenAICompatLLM:
    """Chat-completions client implementing the LLM port.

    Args:
        base_url: server root including ``/v1`` (e.g. ``http://localhost:11434/v1``).
        model: model name the server knows.
        api_key: bearer token; default from the ``api_key_env`` environment variable, if set.
        timeout_s: HTTP timeout of one request (the runtime adds its own bound on top).
        extra_body: extra JSON fields sent with every request (e.g. ``{"seed": 0}``).
        transport: replaces the HTTP call (tests).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        extra_body: dict[str, Any] | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.transport = transport or _urllib_transport
        self.last_usage: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatLLM(url={self.url!r}, model={self.model!r})"

    def _body(
        self,
        prompt: str | Sequence[Message],
        temperature: float | None,
        max_tokens: int | None,
        stop: Sequence[str] | None,
    ) -> bytes:
        body: dict[str, Any] = {"model": self.model, "messages": as_messages(prompt), **self.extra_body}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if stop:
            body["stop"] = list(stop)
        return json.dumps(body).encode("utf-8")

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            status, raw = self.transport(
                self.url, self._body(prompt, temperature, max_tokens, stop), headers, self.timeout_s
            )
        except TimeoutError as exc:
            raise LLMTimeoutError(f"{self.url}: no answer within {self.timeout_s:g}s") from exc
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            raise LLMError(f"{self.url}: cannot reach the server ({exc}); is it running?", transient=True) from exc
        if status != 200:
            detail = raw[:300].decode("utf-8", "replace")
            raise LLMError(f"{self.url}: HTTP {status}: {detail}", transient=status in _TRANSIENT_STATUS)
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            content = (choice.get("message") or {}).get("content")
            if content is None:
                content = choice.get("text", "")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(f"{self.url}: not an OpenAI chat-completions response: {raw[:200]!r}") from exc
        self.last_usage = data.get("usage") if isinstance(data, dict) else None
        return str(content or "")

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        return await asyncio.to_thread(self.complete, prompt, temperature=temperature, max_tokens=max_tokens, stop=stop)
