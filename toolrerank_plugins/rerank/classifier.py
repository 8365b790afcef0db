"""Query-type classifier: is a query served by one tool or by several?

Logistic regression on the engine's bi-encoder query embeddings (bundled MiniLM by default), trained
with plain numpy. Why this and not a fine-tuned sequence classifier: the embeddings are already computed
or cheap (one ~10 ms encode per query), training takes seconds on CPU, the model is 385 numbers saved as
JSON (no pickle, no new dependency), and on our dev splits it is accurate enough that the oracle gains
little (see docs/benchmarks/toolrerank.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._version import __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.records import LabelledQuery

logger = logging.getLogger(__name__)

QueryType = Literal["single", "multi"]
CLASSIFIER_FORMAT_VERSION = 1
CLASSIFIER_FILE = "classifier.json"


def query_type(query: LabelledQuery, catalog: Catalog) -> QueryType:
    """Gold label: ``multi`` when the relevant APIs span more than one tool (unknown ids count as their own)."""
    keys = set()
    for rid in query.relevant:
        spec = catalog.get(rid)
        keys.add(spec.tool_key if spec is not None else rid)
    return "multi" if len(keys) > 1 else "single"


class QueryTypeClassifier:
    """Logistic regression over normalised query embeddings; ``predict`` returns ``"single"``/``"multi"``.

    Example:
        >>> from toolrerank_plugins.testing import FakeEmbedder
        >>> clf = QueryTypeClassifier(FakeEmbedder(32))
        >>> _ = clf.fit(["get weather", "weather now", "weather and mail", "mail and map"],
        ...             ["single", "single", "multi", "multi"], epochs=300)
        >>> clf.predict(["weather and mail"])
        ['multi']
    """

    def __init__(self, embedder: Embedder, *, weights: np.ndarray | None = None, bias: float = 0.0) -> None:
        self.embedder = embedder
        self.weights = weights
        self.bias = float(bias)
        self.threshold = 0.5
        self.info: dict[str, Any] = {}

    @property
    def is_fitted(self) -> bool:
        return self.weights is not None

    def fit(
        self,
        queries: Sequence[str],
        labels: Sequence[str],
        *,
        epochs: int = 500,
        lr: float = 0.5,
        l2: float = 1e-3,
        balance: bool = True,
    ) -> QueryTypeClassifier:
        """Full-batch gradient descent on the (class-balanced) logistic loss."""
        if len(queries) != len(labels):
            raise ValueError(f"{len(queries)} queries but {len(labels)} labels")
        bad = sorted({lab for lab in labels if lab not in ("single", "multi")})
        if bad:
            raise ValueError(f"labels must be 'single' or 'multi', got {bad}")
        y = np.array([1.0 if lab == "multi" else 0.0 for lab in labels])
        if len(set(y.tolist())) < 2:
            raise ValueError("training data holds only one query type; need both single- and multi-tool queries")
        x = self.embedder.encode(list(queries)).astype(np.float64)
        w = np.zeros(x.shape[1])
        b = 0.0
        pos = y.mean()
        sample_w = np.where(y == 1, 0.5 / pos, 0.5 / (1 - pos)) if balance else np.ones_like(y)
        sample_w = sample_w / sample_w.sum()
        for _ in range(epochs):
            p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
            g = (p - y) * sample_w
            w -= lr * (x.T @ g + l2 * w)
            b -= lr * float(g.sum())
        self.weights, self.bias = w.astype(np.float32), float(b)
        acc = float(np.mean((self.proba_from_embeddings(x) > self.threshold) == (y == 1)))
        self.info = {"n_train": len(y), "n_multi": int(y.sum()), "train_accuracy": acc}
        return self

    def proba_from_embeddings(self, x: np.ndarray) -> np.ndarray:
        if self.weights is None:
            raise ConfigError("the query-type classifier is not trained; call fit() or load() first")
        if x.shape[1] != self.weights.shape[0]:
            raise ConfigError(
                f"classifier expects {self.weights.shape[0]}-d embeddings but the embedder gives {x.shape[1]}-d; "
                "use the embedder it was trained with or retrain it (`toolrerank train classifier`)"
            )
        return np.asarray(1.0 / (1.0 + np.exp(-(x @ self.weights + self.bias))))

    def predict_proba(self, queries: Sequence[str]) -> np.ndarray:
        """P(multi-tool) per query."""
        if not queries:
            return np.zeros(0)
        return self.proba_from_embeddings(self.embedder.encode(list(queries)))

    def predict(self, queries: Sequence[str]) -> list[QueryType]:
        return ["multi" if p > self.threshold else "single" for p in self.predict_proba(queries)]

    def save(self, path: str | Path) -> Path:
        """Write ``classifier.json`` (weights as a list of floats) into folder ``path``."""
        if self.weights is None:
            raise ConfigError("cannot save an untrained classifier")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        data = {
            "library": "toolrerank-plugins",
            "library_version": __version__,
            "format_version": CLASSIFIER_FORMAT_VERSION,
            "kind": "logistic_regression_on_embeddings",
            "embedder": self.embedder.model_id,
            "dimension": int(self.weights.shape[0]),
            "weights": [float(v) for v in self.weights],
            "bias": self.bias,
            "threshold": self.threshold,
            "info": self.info,
        }
        write_atomic(folder / CLASSIFIER_FILE, json.dumps(data))
        return folder

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder) -> QueryTypeClassifier:
        """Load from a folder holding ``classifier.json``; the embedder must match the one it was trained on."""
        file = Path(path) / CLASSIFIER_FILE
        if not file.is_file():
            raise PersistenceError(
                f"{path}: no {CLASSIFIER_FILE}; train a classifier with `toolrerank train classifier --out DIR`"
            )
        data = read_json(file, "classifier file", advice="; retrain it")
        try:
            version = int(data["format_version"])
            weights = np.asarray(data["weights"], dtype=np.float32)
            bias = float(data["bias"])
            threshold = float(data.get("threshold", 0.5))
            info = dict(data.get("info") or {})
        except (KeyError, TypeError, ValueError, RecursionError) as exc:
            raise PersistenceError(f"{file}: corrupt classifier file ({exc}); retrain it") from exc
        if weights.ndim != 1 or not np.isfinite(weights).all() or not np.isfinite([bias, threshold]).all():
            raise PersistenceError(
                f"{file}: corrupt classifier file (weights must be a list of finite numbers, bias and threshold "
                "finite); retrain it"
            )
        if version > CLASSIFIER_FORMAT_VERSION:
            raise PersistenceError(
                f"{file}: format {version} is newer than this version's {CLASSIFIER_FORMAT_VERSION}; "
                "upgrade toolrerank-plugins"
            )
        if data.get("embedder") != embedder.model_id:
            logger.warning(
                "classifier %s was trained on embedder %s but runs with %s; accuracy may suffer",
                path,
                data.get("embedder"),
                embedder.model_id,
            )
        clf = cls(embedder, weights=weights, bias=bias)
        clf.threshold = threshold
        clf.info = info
        if weights.shape[0] != embedder.dimension:
            raise PersistenceError(
                f"{file}: trained on {weights.shape[0]}-d embeddings but the embedder gives {embedder.dimension}-d; "
                "retrain with `toolrerank train classifier`"
            )
        return clf
