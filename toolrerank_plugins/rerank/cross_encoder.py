"""Cross-encoder rerankers behind one small interface, plus their on-disk format.

A reranker scores ``(query, text)`` pairs in [0, 1]. The shipped backend is a sentence-transformers
``CrossEncoder`` loaded from a local folder (trained with ``toolrerank train reranker``). Next to the
weights, a reranker folder holds ``toolrerank_reranker.json``: the format version, the base model, and
the *seen tools* (tool keys that appeared in the reranker's labelled training data), which adaptive
truncation needs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins._extras import require
from toolrerank_plugins._version import __version__
from toolrerank_plugins.encoders import quiet_weight_loading
from toolrerank_plugins.errors import ConfigError, PersistenceError

logger = logging.getLogger(__name__)

#: On-disk format of a reranker folder; bump on incompatible changes.
RERANKER_FORMAT_VERSION = 1
RERANKER_META = "toolrerank_reranker.json"
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


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
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
        raise PersistenceError(f"{meta_file}: corrupt JSON ({exc}); retrain or restore the folder") from exc
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
    ) -> None:
        self.model_name_or_path = str(model_name_or_path)
        if check_meta:
            self.meta = read_reranker_meta(self.model_name_or_path)
        else:
            if not Path(self.model_name_or_path).is_dir():
                raise ConfigError(f"{model_name_or_path!r} is not a local folder; models load offline only")
            self.meta = {}
        self.requested_device = device
        self.batch_size = batch_size
        self.max_length = max_length or self.meta.get("max_length") or 256
        self.show_progress_bar = show_progress_bar
        self.model_kwargs = dict(model_kwargs or {})
        self._model: Any = None

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

    def score(self, query: str, texts: Sequence[str], *, batch_size: int | None = None) -> list[float]:
        if not texts:
            return []
        torch = require("torch")
        with torch.inference_mode():
            # CrossEncoder.predict sorts pairs by length before batching and restores the order.
            out = self.model.predict(
                [(query, t) for t in texts],
                batch_size=batch_size or self.batch_size,
                show_progress_bar=self.show_progress_bar,
                activation_fn=torch.nn.Sigmoid(),
                convert_to_numpy=True,
            )
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


def load_reranker(path: str | Path, **kwargs: Any) -> SentenceTransformerReranker:
    """Load a reranker folder (checked first: format version, weights, metadata)."""
    return SentenceTransformerReranker(path, **kwargs)
