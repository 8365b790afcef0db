"""Cross-encoder rerankers behind one small interface, plus their on-disk format.

A reranker scores ``(query, text)`` pairs in [0, 1]. A reranker folder (trained with ``toolrerank train
reranker``) holds a sentence-transformers ``CrossEncoder`` and, next to its weights,
``toolrerank_reranker.json``: the format version, the base model, and the *seen tools* (tool keys that appeared
in the reranker's labelled training data), which adaptive truncation needs.

Backends (:data:`RERANKER_BACKENDS`, ``ToolRerankConfig.backend``) run the same folder:

* ``torch``: :class:`SentenceTransformerReranker`, sentence-transformers' ``CrossEncoder.predict``;
* ``onnx`` / ``onnx-int8``: :class:`OnnxReranker`, the folder exported here to ONNX (sigmoid in the graph) and
  run by ONNX Runtime, float32 or with int8 weights (dynamic quantisation); the ``[fast]`` extra. The export
  is cached under ``TOOLRERANK_CACHE`` (see :mod:`toolrerank_plugins.cpu_encoders`), keyed by a hash of the
  weights. Measured in docs/benchmarks/toolrerank.md ("Interactive latency on a CPU").

On a CPU every backend picks each call's intra-op threads by measured speed (one thread, or all of them;
:class:`~toolrerank_plugins.encoders.ThreadChooser`) unless ``threads`` is set.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._extras import require
from toolrerank_plugins._version import __version__
from toolrerank_plugins.encoders import ThreadChooser, intra_op_threads, quiet_weight_loading
from toolrerank_plugins.errors import ConfigError, PersistenceError

logger = logging.getLogger(__name__)

#: On-disk format of a reranker folder; bump on incompatible changes.
RERANKER_FORMAT_VERSION = 1
RERANKER_META = "toolrerank_reranker.json"
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
#: Backends a reranker folder runs on (``ToolRerankConfig.backend``); see the module docs.
RerankerBackend = Literal["torch", "onnx", "onnx-int8"]
RERANKER_BACKENDS: tuple[str, ...] = ("torch", "onnx", "onnx-int8")


@runtime_checkable
class Reranker(Protocol):
    """Scores candidate texts for one query, in [0, 1], higher is more relevant.

    Implementations batch internally; ``batch_size`` overrides the constructor's value for one call.
    """

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]: ...


def read_reranker_meta(path: str | Path) -> dict[str, Any]:
    """Read and check ``toolrerank_reranker.json`` of a reranker folder.

    Raises:
        PersistenceError: the folder is missing, is not a toolrerank reranker, comes from a newer
            format version, or lacks its weights.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise PersistenceError(f"reranker folder {folder} does not exist; train one with `toolrerank train reranker`")
    meta_file = folder / RERANKER_META
    if not meta_file.is_file():
        raise PersistenceError(
            f"{folder}: no {RERANKER_META}; not a toolrerank reranker folder "
            "(train one with `toolrerank train reranker --out DIR`, or use write_reranker_meta on your own model)"
        )
    meta = read_json(meta_file, "reranker metadata", advice="; retrain or restore the folder")
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int):
        raise PersistenceError(f"{meta_file}: missing 'format_version'; not written by toolrerank-plugins")
    if meta["format_version"] > RERANKER_FORMAT_VERSION:
        raise PersistenceError(
            f"{folder}: reranker format {meta['format_version']} (written by toolrerank-plugins "
            f"{meta.get('library_version')}) is newer than this version's {RERANKER_FORMAT_VERSION} "
            f"(toolrerank-plugins {__version__}); upgrade toolrerank-plugins"
        )
    if not (folder / "config.json").is_file():
        raise PersistenceError(f"{folder}: config.json of the model is missing; the folder is incomplete")
    if not any((folder / w).is_file() for w in _WEIGHT_FILES):
        raise PersistenceError(f"{folder}: model weights ({' or '.join(_WEIGHT_FILES)}) are missing")
    return meta


def write_reranker_meta(path: str | Path, *, seen_tools: Iterable[str] = (), **extra: Any) -> Path:
    """Write ``toolrerank_reranker.json`` (format version, seen tools, training facts) into ``path``."""
    folder = Path(path)
    meta = {
        "library": "toolrerank-plugins",
        "library_version": __version__,
        "format_version": RERANKER_FORMAT_VERSION,
        "seen_tools": sorted(set(seen_tools)),
        **extra,
    }
    out = folder / RERANKER_META
    write_atomic(out, json.dumps(meta, indent=1, ensure_ascii=False))
    return out


class SentenceTransformerReranker:
    """A sentence-transformers ``CrossEncoder`` from a local folder; scores through a sigmoid in [0, 1].

    Args:
        model_name_or_path: a folder written by ``toolrerank train reranker`` (or any local CrossEncoder
            folder holding ``toolrerank_reranker.json``).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"``.
        batch_size: pairs per forward pass.
        max_length: word pieces per (query, text) pair; ``None`` uses the length the model was trained with
            (recorded in ``toolrerank_reranker.json``), else 256.
        show_progress_bar: forwarded to ``CrossEncoder.predict``.
        model_kwargs: passed to ``CrossEncoder(model_kwargs=...)``.
        check_meta: require ``toolrerank_reranker.json`` (set False for a raw CrossEncoder folder).
        threads: torch intra-op threads for every call on a CPU; None (default): chosen per call by measured
            speed (:class:`~toolrerank_plugins.encoders.ThreadChooser`: one thread or torch's count), set only
            for the call in the calling thread (:func:`~toolrerank_plugins.encoders.intra_op_threads`).
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        device: str | None = "auto",
        batch_size: int = 64,
        max_length: int | None = None,
        show_progress_bar: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        check_meta: bool = True,
        threads: int | None = None,
    ) -> None:
        self.model_name_or_path = str(model_name_or_path)
        self.meta = _folder_meta(self.model_name_or_path, check_meta)
        self.requested_device = device
        self.batch_size = batch_size
        self.max_length = max_length or self.meta.get("max_length") or 256
        self.show_progress_bar = show_progress_bar
        self.model_kwargs = dict(model_kwargs or {})
        self.threads = threads
        self._model: Any = None
        self._chooser: ThreadChooser | None = None

    @property
    def seen_tools(self) -> frozenset[str]:
        """Tool keys seen in the labelled training data (recorded at training time)."""
        return frozenset(self.meta.get("seen_tools", ()))

    @property
    def model(self) -> Any:
        if self._model is None:
            st = require("sentence_transformers")
            from toolrerank_plugins.device import resolve_device

            device = resolve_device(self.requested_device)
            logger.info("loading cross-encoder %s on %s", self.model_name_or_path, device)
            with quiet_weight_loading():
                self._model = st.CrossEncoder(
                    self.model_name_or_path,
                    device=device,
                    max_length=self.max_length,
                    local_files_only=True,
                    model_kwargs=self.model_kwargs or None,
                )
            self._model.eval()
        return self._model

    def threads_for(self) -> int | None:
        """The intra-op threads the next call runs with (None: torch's count, unchanged)."""
        if self.threads:
            return self.threads
        if not str(getattr(self.model, "device", "cpu")).startswith("cpu"):
            return None
        if self._chooser is None:
            self._chooser = ThreadChooser(require("torch").get_num_threads())
        return self._chooser.pick()

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]:
        if not texts:
            return []
        torch = require("torch")
        threads = self.threads_for()
        start = time.perf_counter()
        with intra_op_threads(threads), torch.inference_mode():
            # CrossEncoder.predict sorts pairs by length before batching and restores the order.
            out = self.model.predict(
                [(query, t) for t in texts],
                batch_size=batch_size or self.batch_size,
                show_progress_bar=self.show_progress_bar,
                activation_fn=torch.nn.Sigmoid(),
                convert_to_numpy=True,
            )
        if self._chooser is not None and threads is not None and not self.threads:
            self._chooser.record(threads, time.perf_counter() - start, _work(query, texts))
        return [float(x) for x in out.reshape(-1)]

    def save(self, path: str | Path) -> Path:
        """Copy the model (``save_pretrained`` layout) and its metadata into ``path``."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(str(folder))
        meta = {k: v for k, v in self.meta.items() if k not in ("library", "library_version", "format_version")}
        meta.setdefault("seen_tools", [])
        write_reranker_meta(folder, **meta)
        return folder


def _folder_meta(path: str, check_meta: bool) -> dict[str, Any]:
    if check_meta:
        return read_reranker_meta(path)
    if not Path(path).is_dir():
        raise ConfigError(f"{path!r} is not a local folder; models load offline only")
    return {}


def _work(query: str, texts: Sequence[str]) -> int:
    """Characters a call scores (the thread chooser's measure of a call's size)."""
    return len(query) * len(texts) + sum(map(len, texts))


def _cpu_threads() -> int:
    """CPUs this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class OnnxReranker:
    """A reranker folder run by ONNX Runtime on a CPU (``backend="onnx"`` / ``"onnx-int8"``, the ``[fast]``
    extra): the folder's cross-encoder exported to ONNX with the sigmoid in the graph (on first use, cached under
    ``TOOLRERANK_CACHE``, keyed by a hash of the weights), float32 or with int8 weights (``quantize``: dynamic
    quantisation). Same scores as :class:`SentenceTransformerReranker` up to rounding (float32) or close to them
    (int8; judge it by ranking quality, docs/benchmarks/toolrerank.md).

    Args:
        model_name_or_path: a reranker folder (as for :class:`SentenceTransformerReranker`).
        quantize: int8 weights instead of float32.
        batch_size: pairs per forward pass (pairs are sorted by length first, so a batch pads little).
        max_length: word pieces per pair; ``None``: the length the model was trained with, else 256.
        threads: ONNX Runtime intra-op threads for every call; None (default): chosen per call by measured
            speed between one thread and all the CPUs (:class:`~toolrerank_plugins.encoders.ThreadChooser`),
            one session each (a session's thread count is fixed when it is made).
        check_meta: require ``toolrerank_reranker.json``.
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        quantize: bool = False,
        batch_size: int = 64,
        max_length: int | None = None,
        threads: int | None = None,
        check_meta: bool = True,
    ) -> None:
        self.model_name_or_path = str(model_name_or_path)
        self.meta = _folder_meta(self.model_name_or_path, check_meta)
        self.quantize = quantize
        self.batch_size = batch_size
        self.max_length = int(max_length or self.meta.get("max_length") or 256)
        self.threads = threads
        self._folder: Path | None = None
        self._tokenizer: Any = None
        self._sessions: dict[int, Any] = {}
        self._chooser = ThreadChooser(_cpu_threads()) if threads is None else None
        self._lock = threading.Lock()

    @property
    def seen_tools(self) -> frozenset[str]:
        """Tool keys seen in the labelled training data (recorded at training time)."""
        return frozenset(self.meta.get("seen_tools", ()))

    @property
    def backend(self) -> str:
        return "onnx-int8" if self.quantize else "onnx"

    def _ready(self) -> Path:
        if self._folder is None:
            from toolrerank_plugins.cpu_encoders import export_onnx

            self._folder = export_onnx(self.model_name_or_path, quantize=self.quantize, head="score")
        return self._folder

    def _session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is None:
            from toolrerank_plugins.cpu_encoders import onnx_session

            with self._lock:
                session = self._sessions.get(threads)
                if session is None:
                    name = "model.int8.onnx" if self.quantize else "model.onnx"
                    session = self._sessions[threads] = onnx_session(self._ready() / name, threads)
        return session

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            auto = require("transformers").AutoTokenizer
            self._tokenizer = auto.from_pretrained(self._ready(), local_files_only=True)
        return self._tokenizer

    def threads_for(self) -> int:
        """The intra-op threads the next call runs with."""
        if self.threads:
            return self.threads
        assert self._chooser is not None
        return self._chooser.pick()

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]:
        if not texts:
            return []
        from toolrerank_plugins.cpu_encoders import onnx_feed

        threads = self.threads_for()
        session = self._session(threads)
        tokenizer = self.tokenizer
        start = time.perf_counter()
        size = batch_size or self.batch_size
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
        out = np.empty(len(texts), dtype=np.float32)
        for begin in range(0, len(order), size):
            chunk = order[begin : begin + size]
            enc = tokenizer(
                [query] * len(chunk),
                [texts[i] for i in chunk],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="np",
            )
            out[chunk] = session.run(None, onnx_feed(session, enc))[0].reshape(-1)
        if self._chooser is not None:
            self._chooser.record(threads, time.perf_counter() - start, _work(query, texts))
        return [float(x) for x in out]

    def save(self, path: str | Path) -> Path:
        """Copy the reranker folder (the torch weights, tokenizer and metadata; not the ONNX export, which is a
        cache any backend can remake) into ``path``."""
        folder = Path(path)
        source = Path(self.model_name_or_path)
        if folder.resolve() != source.resolve():
            shutil.copytree(source, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(RERANKER_META))
        meta = {k: v for k, v in self.meta.items() if k not in ("library", "library_version", "format_version")}
        meta.setdefault("seen_tools", [])
        write_reranker_meta(folder, **meta)
        return folder


class CachedReranker:
    """Memoises another reranker's scores by ``(query, text)`` (for tuning grids, not for latency numbers)."""

    def __init__(self, inner: Reranker) -> None:
        self.inner = inner
        self._cache: dict[tuple[str, str], float] = {}
        self.pairs_scored = 0

    @property
    def seen_tools(self) -> frozenset[str]:
        return frozenset(getattr(self.inner, "seen_tools", frozenset()))

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]:
        missing = list(dict.fromkeys(t for t in texts if (query, t) not in self._cache))
        if missing:
            for t, s in zip(missing, self.inner.score(query, missing, batch_size=batch_size)):
                self._cache[(query, t)] = float(s)
            self.pairs_scored += len(missing)
        return [self._cache[(query, t)] for t in texts]


def load_reranker(
    path: str | Path, *, backend: str = "torch", **kwargs: Any
) -> SentenceTransformerReranker | OnnxReranker:
    """Load a reranker folder (checked first: format version, weights, metadata) on ``backend`` (one of
    :data:`RERANKER_BACKENDS`). ``device`` and ``model_kwargs`` apply to ``torch`` only (ONNX runs on the CPU)."""
    if backend == "torch":
        return SentenceTransformerReranker(path, **kwargs)
    if backend in ("onnx", "onnx-int8"):
        device = kwargs.pop("device", None)
        if device not in (None, "auto", "cpu"):
            raise ConfigError(f"reranker backend {backend!r} runs on the CPU only; device {device!r} needs 'torch'")
        kwargs.pop("model_kwargs", None)
        return OnnxReranker(path, quantize=backend == "onnx-int8", **kwargs)
    raise ConfigError(f"unknown reranker backend {backend!r}; known: {', '.join(RERANKER_BACKENDS)}")
