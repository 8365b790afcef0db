"""How likely a search result is to fit the request: a probability per result, calibrated without labels.

The engine's ``min_relevance`` option (``Engine.search(..., min_relevance=0.5)``: "no tool fits") keeps only
results whose probability reaches it. The probability is a logistic model over three label-free features of a
result ``r`` for a request ``q`` (and, for a multi-request message, each of its requests; the best one counts):

- ``cosine``: the bi-encoder's cosine between ``q`` and ``r``'s document vector (the first stage's own vectors;
  the request's vector is the one the first stage searched with, so nothing is encoded twice);
- ``coverage``: the share of ``q``'s words, weighted by their inverse document frequency in the catalog, that
  ``r``'s text contains (identifiers split into words, a plural's ``s`` dropped);
- ``standing``: how far ``cosine`` stands above the query's other candidates (z-score over the first stage's
  candidates).

Its weights are fitted once per catalog version, on first use, from **pseudo-requests built from the catalog's
own texts**: ``pseudo_queries`` APIs are drawn (seeded), each one's description (its first ``pseudo_query_words``
words; the name when it has none) is searched like a request; the API itself is a *fitting* example, and the
best other API, ranked as if the drawn one were missing, a *not fitting* one -- the case "the tool that fits was
removed" that the option is for. No labels, no LLM. Both classes weigh the same, so the probability assumes one
request in two has a fitting tool; raise ``min_relevance`` for catalogs that nearly always have one.

Pseudo-requests repeat their API's words more than users do, so the model is only as good as that proxy: the
trade-off it gives on real requests is measured in ``docs/benchmarks.md`` ("No tool fits").

Example:
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())
    >>> hits = engine.search("send an email message", top_k=3, min_relevance=0.0)
    >>> all(0.0 <= h.stage_scores["relevance"] <= 1.0 for h in hits)
    True
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.records import ScoredTool, ToolSpec

if TYPE_CHECKING:
    from toolrerank_plugins.catalog import Catalog
    from toolrerank_plugins.encoders import Embedder
    from toolrerank_plugins.retrieval.base import FirstStage

#: ``stage_scores`` key of a result's relevance (a probability in [0, 1]) when a search asked for it
RELEVANCE = "relevance"
FEATURES = ("cosine", "coverage", "standing")

_WORDS = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_STOP = frozenset(
    "a an the of to for in on at by with from and or not no is are was were be been it its this that these those "
    "i me my we our you your he she they them their what which who whom how when where why can could would should "
    "will shall may might do does did done please want need like get give show tell find let also about into "
    "some any all there here than then so if as up out just".split()
)


class RelevanceConfig(ConfigModel):
    """How the relevance model is calibrated (label-free, on pseudo-requests from the catalog's own texts).

    Attributes:
        pseudo_queries: APIs drawn as pseudo-requests (fewer when the catalog is smaller).
        pseudo_query_words: words of a drawn API's description that make its pseudo-request.
        depth: candidates per request over which ``standing`` is measured.
        seed: the draw's seed (the same catalog gives the same model).
        l2: ridge penalty of the logistic fit.
        pseudo_query_name: keep the drawn API's own name words in its pseudo-request (more literal).
        pseudo_query_noise: share of a pseudo-request's words replaced by words of other APIs' descriptions.
        calibration: ``no_fit_share`` (a result's relevance is the share of pseudo "no tool fits" cases it
            scores above) or ``logistic`` (the model's own probability; far too strict on real requests).
        scope: what ``min_relevance`` drops: ``result`` (every result below it) or ``query`` (all results when
            the best one is below it, none otherwise: fewer relevant results lost, measured).
    """

    pseudo_queries: int = Field(256, ge=8)
    pseudo_query_words: int = Field(12, ge=2)
    pseudo_query_name: bool = False
    pseudo_query_noise: float = Field(0.0, ge=0.0, lt=1.0)
    calibration: Literal["no_fit_share", "logistic"] = "no_fit_share"
    scope: Literal["result", "query"] = "result"

    def fits_like(self, other: RelevanceConfig) -> bool:
        """Whether ``other`` gives the same model (it may differ in ``scope``, which only the search reads)."""
        return self.model_dump(exclude={"scope"}) == other.model_dump(exclude={"scope"})

    depth: int = Field(50, ge=5)
    seed: int = 0
    l2: float = Field(1.0, ge=0.0)


@dataclass(frozen=True)
class RelevanceModel:
    """A logistic model over :data:`FEATURES`: ``sigmoid(weights . features + bias)``."""

    weights: tuple[float, ...]
    bias: float
    n_pseudo: int = 0
    fit: Mapping[str, float] = field(default_factory=dict)
    #: sorted logits of the pseudo "no tool fits" cases: with them, a result's relevance is the share of those
    #: cases it beats (``calibration="no_fit_share"``); without, the logistic probability
    no_fit: tuple[float, ...] = ()

    def logit(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, dtype=np.float64) @ np.asarray(self.weights) + self.bias

    def probability(self, features: np.ndarray) -> np.ndarray:
        """Relevance of rows of ``features`` (n x 3), in [0, 1]."""
        z = self.logit(features)
        if self.no_fit:
            ref = np.asarray(self.no_fit)
            return (np.searchsorted(ref, z, side="left") + np.searchsorted(ref, z, side="right") + 1.0) / (
                2.0 * len(ref) + 2.0
            )
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(FEATURES),
            "weights": [round(w, 4) for w in self.weights],
            "bias": round(self.bias, 4),
            "n_pseudo": self.n_pseudo,
            **{k: round(v, 4) for k, v in self.fit.items()},
        }


def words(text: str) -> list[str]:
    """Content words of ``text``: identifiers split, lower-cased, stopwords and one-letter words dropped, a
    plural's final ``s`` removed from words of more than three letters (``getUserNames`` -> ``user``, ``name``).

    Example:
        >>> words("Get the forecasts for getUserNames")
        ['forecast', 'user', 'name']
    """
    out: list[str] = []
    for raw in _WORDS.findall(text):
        for part in _CAMEL.split(raw):
            w = part.lower()
            if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
                w = w[:-1]
            if len(w) > 1 and w not in _STOP:
                out.append(w)
    return out


class RelevanceScorer:
    """Relevance of results over one catalog version and first stage (built by the engine, once per version).

    Args:
        catalog: the catalog searched.
        first_stage: its first stage (document and query vectors, candidate searches for calibration).
        embedder: encodes what the first stage has no vectors for (a BM25 first stage: the results' texts).
        render: the text of an API (coverage is measured over it).
        config: calibration settings.
    """

    def __init__(
        self,
        catalog: Catalog,
        first_stage: FirstStage,
        embedder: Callable[[], Embedder],
        render: Callable[[ToolSpec], str],
        config: RelevanceConfig | None = None,
    ) -> None:
        self.catalog = catalog
        self.first_stage = first_stage
        self._embedder = embedder
        self.render = render
        self.config = config or RelevanceConfig()
        self._words: dict[str, frozenset[str]] = {}
        self._idf: dict[str, float] | None = None
        self._vectors: dict[str, np.ndarray] = {}
        self._model: RelevanceModel | None = None
        self._fit_lock = threading.Lock()  # one fit, however many searches ask at once

    # -- features ----------------------------------------------------------------------------------
    def _doc_words(self, tool_id: str) -> frozenset[str]:
        found = self._words.get(tool_id)
        if found is None:
            found = frozenset(words(self.render(self.catalog[tool_id])))
            self._words[tool_id] = found
        return found

    @property
    def idf(self) -> dict[str, float]:
        """Inverse document frequency of each word of the catalog's texts."""
        if self._idf is None:
            df: dict[str, int] = {}
            for spec in self.catalog:
                for w in self._doc_words(spec.id):
                    df[w] = df.get(w, 0) + 1
            n = max(1, len(self.catalog))
            self._idf = {w: math.log(1.0 + n / (c + 0.5)) for w, c in df.items()}
        return self._idf

    def doc_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Unit document vectors of ``ids`` (the first stage's, else encoded once and kept)."""
        cached = self.first_stage.embeddings_for(ids)
        if cached is not None:
            return np.asarray(cached, dtype=np.float32)
        missing = [i for i in dict.fromkeys(ids) if i not in self._vectors]
        if missing:
            encoded = self._embedder().encode([self.render(self.catalog[i]) for i in missing])
            self._vectors.update(zip(missing, _unit(np.asarray(encoded, dtype=np.float32))))
        return np.stack([self._vectors[i] for i in ids]) if ids else np.zeros((0, 1), dtype=np.float32)

    def query_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts`` as the first stage encodes queries (its recent ones are reused)."""
        vectors = self.first_stage.query_vectors(texts)
        if vectors is None:
            vectors = self._embedder().encode(list(texts))
        return _unit(np.asarray(vectors, dtype=np.float32))

    def coverage(self, text_words: Sequence[str], tool_id: str) -> float:
        """Share of ``text_words``' idf weight that ``tool_id``'s text holds (words the catalog never uses
        count for nothing)."""
        idf = self.idf
        known = {w for w in text_words if w in idf}
        if not known:
            return 0.0
        doc = self._doc_words(tool_id)
        return sum(idf[w] for w in known if w in doc) / sum(idf[w] for w in known)

    def features(
        self, texts: Sequence[str], ids: Sequence[str], candidates: Sequence[str], *, skip: str | None = None
    ) -> np.ndarray:
        """:data:`FEATURES` of ``ids`` for a request made of ``texts`` (the query, then its requests; the best
        text counts for each result); ``standing`` is measured over ``candidates`` (without ``skip``)."""
        if not ids:
            return np.zeros((0, len(FEATURES)))
        q = self.query_vectors(texts)
        pool = [c for c in dict.fromkeys([*candidates, *ids]) if c != skip]
        vectors = self.doc_vectors(pool)
        cos_pool = vectors @ q.T  # (pool, texts)
        mean, std = cos_pool.mean(axis=0), cos_pool.std(axis=0) + 1e-6
        at = {c: n for n, c in enumerate(pool)}
        text_words = [words(t) for t in texts]
        rows = []
        for i in ids:
            cos = cos_pool[at[i]] if i in at else self.doc_vectors([i])[0] @ q.T
            standing = (cos - mean) / std
            cover = [self.coverage(tw, i) for tw in text_words]
            rows.append((float(np.max(cos)), float(np.max(cover)), float(np.max(standing))))
        return np.asarray(rows, dtype=np.float64)

    # -- the model ---------------------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        """Whether the model is fitted (or adopted) already."""
        return self._model is not None

    def adopt(self, other: RelevanceScorer) -> None:
        """Use ``other``'s model (fitted on a catalog that differs from this one by a few APIs)."""
        self._model = other.model

    @property
    def model(self) -> RelevanceModel:
        """The calibrated model (fitted on first use; a few seconds for a large catalog)."""
        if self._model is None:
            with self._fit_lock:
                if self._model is None:
                    self._model = self.calibrate()
        return self._model

    def pseudo_query(self, spec: ToolSpec, rng: np.random.Generator | None = None) -> str:
        """A drawn API's pseudo-request: the first ``pseudo_query_words`` words of its description (its name
        when it has none; the API's and its tool's name words left out unless ``pseudo_query_name``), with a
        ``pseudo_query_noise`` share of them replaced by words of other APIs' descriptions (a request says more
        than the API it needs: names, dates, context)."""
        text = spec.description.strip() or " ".join(words(spec.name))
        if not self.config.pseudo_query_name and spec.description.strip():
            own = set(words(spec.name)) | set(words(spec.tool or ""))
            kept = [w for w in text.split() if not set(words(w)) & own]
            text = " ".join(kept) or text
        chosen = text.split()[: self.config.pseudo_query_words]
        noise = self.config.pseudo_query_noise
        if rng is None or noise <= 0 or len(self.catalog) < 2:
            return " ".join(chosen)
        ids = self.catalog.ids
        out = []
        for w in chosen:
            if rng.random() < noise:
                other = self.catalog[ids[int(rng.integers(len(ids)))]].description.split()
                out.append(other[int(rng.integers(len(other)))] if other else w)
            else:
                out.append(w)
        return " ".join(out)

    def calibrate(self) -> RelevanceModel:
        """Fit the logistic model on pseudo-requests (see the module docs)."""
        cfg = self.config
        ids = [s.id for s in self.catalog if (s.description.strip() or s.name.strip())]
        if len(ids) < 2:
            return RelevanceModel((8.0, 4.0, 0.5), -6.0)  # nothing to learn from: a fixed, cautious model
        rng = np.random.default_rng(cfg.seed)
        drawn = [ids[i] for i in sorted(rng.choice(len(ids), min(cfg.pseudo_queries, len(ids)), replace=False))]
        texts = [self.pseudo_query(self.catalog[i], rng) for i in drawn]
        hits = self.first_stage.search(texts, cfg.depth + 1)
        x: list[np.ndarray] = []
        y: list[float] = []
        for source, text, found in zip(drawn, texts, hits):
            candidates = [h.id for h in found]
            others = [c for c in candidates if c != source]
            if not others:
                continue
            x.append(self.features([text], [source], candidates)[0])
            y.append(1.0)
            # the best other API, as if the drawn one were not in the catalog
            negative = self.features([text], others, others)
            x.append(negative[int(np.argmax(negative[:, 0]))])
            y.append(0.0)
        if len(set(y)) < 2:
            return RelevanceModel((8.0, 4.0, 0.5), -6.0)
        xs, ys = np.asarray(x), np.asarray(y)
        model = _fit_logistic(xs, ys, l2=cfg.l2)
        if cfg.calibration == "logistic":
            return model
        no_fit = tuple(float(v) for v in np.sort(model.logit(xs[ys == 0])))
        return RelevanceModel(model.weights, model.bias, model.n_pseudo, model.fit, no_fit)

    # -- scoring -----------------------------------------------------------------------------------
    def score(
        self,
        texts: Sequence[str],
        results: Sequence[ScoredTool],
        candidates: Sequence[str],
        inherits: Mapping[str, str] | None = None,
    ) -> list[float]:
        """The relevance of each result; a result a stage inserted for another one (``inherits``: its id ->
        that result's id, e.g. a prerequisite) counts at least as much as that result."""
        ids = [r.id for r in results]
        if not ids:
            return []
        probs = dict(zip(ids, self.model.probability(self.features(texts, ids, candidates)).tolist()))
        out = []
        for i in ids:
            p = probs[i]
            seen = {i}
            j = (inherits or {}).get(i)
            while j is not None and j not in seen:  # a prerequisite of a prerequisite: follow to the result
                seen.add(j)
                if j in probs:
                    p = max(p, probs[j])
                j = (inherits or {}).get(j)
            out.append(float(p))
        return out


def check_min_relevance(value: Any, name: str = "min_relevance") -> float | None:
    """``value`` as a float in [0, 1], or None (the option is off).

    Raises:
        TypeError: not a number (a bool or a string included).
        ValueError: NaN or outside [0, 1].
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1] or None, got {type(value).__name__}")
    number = float(value)
    if not 0.0 <= number <= 1.0:  # NaN fails both
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return number


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.atleast_2d(m)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def _fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float, steps: int = 50) -> RelevanceModel:
    """Ridge-penalised logistic regression by Newton steps (features standardised, weights mapped back)."""
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mu) / sd
    a = np.hstack([z, np.ones((len(z), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.diag([l2] * z.shape[1] + [0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -40, 40)))
        grad = a.T @ (p - y) + penalty @ w
        hess = (a * (p * (1 - p))[:, None]).T @ a + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    weights = w[:-1] / sd
    bias = float(w[-1] - (w[:-1] * mu / sd).sum())
    p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -40, 40)))
    pos, neg = p[y == 1], p[y == 0]
    auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
    return RelevanceModel(tuple(float(v) for v in weights), bias, n_pseudo=int(y.sum()), fit={"pseudo_auc": auc})
