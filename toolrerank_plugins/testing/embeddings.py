"""A deterministic, dependency-free embedder for tests (hashed bag of words + character trigrams)."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder:
    """Texts sharing words get similar vectors; the same text always gets the same vector.

    Example:
        >>> emb = FakeEmbedder(dimension=64)
        >>> v = emb.encode(["send an email", "send a mail", "weather"])
        >>> float(v[0] @ v[1]) > float(v[0] @ v[2])
        True
    """

    def __init__(self, dimension: int = 128) -> None:
        self._dim = dimension
        self.calls = 0
        self.texts_encoded = 0
        self.threads: list[str] = []  # the thread of each call (a search may encode its requests on a spare one)
        self.word_texts = 0  # texts given word vectors (DenseConfig.part_vectors="word-map")
        self._lock = threading.Lock()  # counted from several threads

    def __getstate__(self) -> dict[str, object]:  # copied or pickled without its lock (a new one on load)
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return f"fake:{self._dim}"

    @property
    def dimension(self) -> int:
        return self._dim

    def _bucket(self, token: str) -> tuple[int, float]:
        h = hashlib.sha256(token.encode("utf-8")).digest()
        return int.from_bytes(h[:4], "little") % self._dim, 1.0 if h[4] & 1 else -1.0

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        with self._lock:
            self.calls += 1
            self.texts_encoded += len(texts)
            self.threads.append(threading.current_thread().name)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in _WORD.findall(text.lower()):
                j, s = self._bucket("w:" + w)
                out[i, j] += 2.0 * s
                padded = f"#{w}#"
                for k in range(len(padded) - 2):
                    j, s = self._bucket("c:" + padded[k : k + 3])
                    out[i, j] += 0.5 * s
            norm = np.linalg.norm(out[i])
            if norm > 0:
                out[i] /= norm
        return out

    def word_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The texts' words hashed into another space than :meth:`encode`'s (each word a signed bucket of its
        own salt), unit length: what ``SentenceTransformerEmbedder.word_vectors`` gives a real model, a cheap
        vector a linear map can carry into the encoder's space."""
        with self._lock:
            self.word_texts += len(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in _WORD.findall(text.lower()):
                j, s = self._bucket("word:" + w)
                out[i, j] += s
            norm = np.linalg.norm(out[i])
            if norm > 0:
                out[i] /= norm
        return out
