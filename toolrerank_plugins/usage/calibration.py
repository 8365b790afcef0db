"""The calibration of the usage memory's votes, measured on the log itself: leave-one-out votes of sampled
log records against the catalog's ranking of them give each rank's precision and a small logistic model of
"this rank and this vote served the request" (:class:`Calibration`)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolrerank_plugins.errors import PersistenceError
from toolrerank_plugins.records import is_finite_number
from toolrerank_plugins.usage.config import UsageMemoryConfig

#: Upper edges of the vote bins of :class:`Calibration` (votes lie in [0, 1]).
VOTE_BINS = tuple(round(0.1 * i, 1) for i in range(1, 11))
#: Rank bins of :class:`Calibration`: (first rank, last rank), 1-based.
RANK_BINS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 50), (51, 10**9))


def _monotone(values: Sequence[float], weights: Sequence[float], *, increasing: bool) -> list[float]:
    """Weighted pool-adjacent-violators: the closest monotone sequence (least squares) to ``values``."""
    vals = list(values) if increasing else [-v for v in values]
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(vals, weights):
        blocks.append([v, max(w, 1e-9), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    out: list[float] = []
    for m, _, c in blocks:
        out.extend([m] * int(c))
    return out if increasing else [-v for v in out]


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


#: How many weights the calibration's logistic model has (:func:`_features`).
N_FEATURES = 6


def _features(rank_p: float, vote: float, part_excess: float) -> list[float]:
    """Intercept, logit of the rank's precision, the vote, "voted", vote x rank logit, and how much of the vote
    only one request of a multi-request message gave (its best vote minus the whole message's)."""
    z = _logit(rank_p)
    return [1.0, z, vote, float(vote > 0), vote * z, part_excess]


def _fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """L2-regularised logistic regression by Newton's method; the first two weights are not penalised."""
    w = np.zeros(x.shape[1])
    pen = np.full(x.shape[1], ridge)
    pen[:2] = 0.0  # the intercept and the rank's weight are not the memory's: only its weights shrink to 0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        grad = x.T @ (p - y) + pen * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(pen + 1e-6)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return w


@dataclass(frozen=True)
class Calibration:
    """How often the memory's votes and the catalog ranking's ranks named a tool that served the request,
    measured on the log itself when it is learned.

    For sampled log records: the record's request is ranked by the catalog (the first stage), and the memory
    without the record (and without any record of the same text) votes, as for a new request.
    ``rank_precision[b]`` is the share of ranked tools at ranks in :data:`RANK_BINS` ``b`` that served the
    request (smoothed towards ``1 / (rank + 1)`` and made non-increasing). A logistic model (``coef``, over
    ``logit(rank precision)``, the vote, "voted" and their product) then gives the probability that a tool
    serves the request from its rank and its vote together: the stage orders candidates by it, so the memory
    moves a tool up only as far as such votes were right, on this log, more often than such ranks. When the
    log gives too little evidence (fewer than ``min_votes`` votes, or no right and no wrong one) ``coef`` is
    empty and a vote counts as far as the leave-one-out votes were right (see :meth:`probability`).
    """

    rank_precision: tuple[float, ...]
    coef: tuple[float, ...] = ()
    n_votes: int = 0
    n_right: int = 0
    records: int = 0

    @property
    def fitted(self) -> bool:
        return len(self.coef) == N_FEATURES

    def rank_p(self, rank: int | None) -> float:
        """Precision of the catalog ranking at ``rank`` (None: not ranked, the deepest bin's)."""
        if rank is not None:
            for (lo, hi), p in zip(RANK_BINS, self.rank_precision):
                if lo <= rank <= hi:
                    return p
        return self.rank_precision[-1]

    def probability(self, rank: int | None, vote: float, part_excess: float = 0.0) -> float:
        """P(the tool serves the request | its rank in the ranking (None: not ranked), its vote, and how much
        of the vote only one request of a multi-request message gave). Without a fitted model (too little
        evidence) ``1 - (1 - rank precision) * (1 - trust * vote)``, ``trust`` the leave-one-out votes' share of
        right ones (Laplace-smoothed), 0 when there was no leave-one-out vote at all: no evidence, no change."""
        if not self.fitted:
            trust = (self.n_right + 1) / (self.n_votes + 2) if self.n_votes else 0.0
            return 1.0 - (1.0 - self.rank_p(rank)) * (1.0 - trust * min(max(vote, 0.0), 1.0))
        z = float(np.dot(self.coef, _features(self.rank_p(rank), vote, part_excess)))
        return 1.0 / (1.0 + math.exp(-min(max(z, -30.0), 30.0)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank_precision": list(self.rank_precision),
            "coef": list(self.coef),
            "n_votes": self.n_votes,
            "n_right": self.n_right,
            "records": self.records,
        }

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> Calibration:
        def numbers(key: str) -> bool:
            v = obj.get(key)
            return isinstance(v, list) and all(is_finite_number(x) for x in v)

        ok = (
            isinstance(obj, dict)
            and numbers("rank_precision")
            and numbers("coef")
            and len(obj["rank_precision"]) == len(RANK_BINS)
            and all(0 <= x <= 1 for x in obj["rank_precision"])
            and len(obj["coef"]) in (0, N_FEATURES)
            and all(isinstance(obj.get(k, 0), int) for k in ("n_votes", "n_right", "records"))
        )
        if not ok:
            raise PersistenceError(f"{where}: corrupt usage memory calibration")
        return cls(
            tuple(float(x) for x in obj["rank_precision"]),
            tuple(float(x) for x in obj["coef"]),
            int(obj.get("n_votes", 0)),
            int(obj.get("n_right", 0)),
            int(obj.get("records", 0)),
        )

    @classmethod
    def fit(
        cls,
        samples: Sequence[tuple[Sequence[str], Mapping[str, tuple[float, float]], set[str]]],
        config: UsageMemoryConfig,
        records: int,
    ) -> Calibration:
        """The calibration from ``samples``: for each sampled log record, the catalog's ranking of its
        request, the memory's leave-one-out votes (tool -> (vote, part excess)) and the tools that served it."""
        longest = max((len(r) for r, _, _ in samples), default=0)
        bins = [next(j for j, (lo, hi) in enumerate(RANK_BINS) if lo <= r <= hi) for r in range(1, 1 + longest)]
        r_hits = [0.0] * len(RANK_BINS)
        r_seen = [0] * len(RANK_BINS)
        for ranking, _, served in samples:
            for rank, tool in enumerate(ranking, start=1):
                r_seen[bins[rank - 1]] += 1
                r_hits[bins[rank - 1]] += tool in served
        a = config.prior
        prior = [1.0 / (lo + 1) for lo, _ in RANK_BINS]
        rank_p = [(h + a * q) / (c + a) for h, c, q in zip(r_hits, r_seen, prior)]
        rank_p = _monotone(rank_p, [c + a for c in r_seen], increasing=False)
        cal = cls(tuple(rank_p), records=records)
        xs: list[list[float]] = []
        ys: list[float] = []
        n_votes = n_right = 0
        for ranking, votes, served in samples:
            ranks = {t: r for r, t in enumerate(ranking, start=1)}
            for tool in set(ranks) | set(votes):
                vote, part = votes.get(tool, (0.0, 0.0))
                xs.append(_features(cal.rank_p(ranks.get(tool)), vote, part))
                ys.append(float(tool in served))
                if vote > 0:
                    n_votes += 1
                    n_right += tool in served
        if n_votes < config.min_votes or n_right in (0, n_votes):
            return cls(tuple(rank_p), (), n_votes, n_right, records)
        coef = _fit_logistic(np.asarray(xs), np.asarray(ys), config.ridge)
        coef[1] = max(coef[1], 1e-3)  # never reverse the ranking's order among tools without votes
        return cls(tuple(rank_p), tuple(float(c) for c in coef), n_votes, n_right, records)


def _stable_sample(ids: Sequence[str], k: int) -> list[int]:
    """Positions of the ``k`` ids with the smallest hash (all when ``k >= len(ids)``): a sample that stays the
    same as a log grows, except for the new ids that enter it."""
    if k >= len(ids):
        return list(range(len(ids)))
    keys = [hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=8).digest() for i in ids]
    return sorted(sorted(range(len(ids)), key=keys.__getitem__)[:k])
