"""Settings chosen per catalog at index time, without labels (``EngineConfig.auto_tune``; issue 29, item 2).

Where one fixed setting cannot serve every catalog (the transfer table in docs/benchmarks.md shows which), the
engine can choose it when it indexes a catalog, from **pseudo-requests built from the catalog's own texts**:
``n`` APIs are drawn (seeded), each one's pseudo-request is the first words of its description with the API's
and its tool's name words left out, and each candidate setting is scored by how high its first stage ranks the
API each pseudo-request was drawn from (mean reciprocal rank). No labels, no LLM; ties keep the configured value.

Knobs (``AUTO_KNOBS``): ``hybrid.fusion`` (``rrf``, ``zscore`` or ``agreement``) and ``bm25.stemmer`` (none or
``english``). The candidates share one encoding of the catalog; each BM25 variant is built once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from toolrerank_plugins.render import render_tool
from toolrerank_plugins.retrieval.base import FirstStage
from toolrerank_plugins.retrieval.relevance import words

if TYPE_CHECKING:
    from toolrerank_plugins.catalog import Catalog

logger = logging.getLogger(__name__)

#: knob -> its candidate values (the first is the one kept on a tie only when it is the configured one)
AUTO_KNOBS: Mapping[str, tuple[Any, ...]] = {
    "hybrid.fusion": ("rrf", "zscore", "agreement"),
    "bm25.stemmer": (None, "english"),
}


@dataclass
class AutoTuneReport:
    """What was chosen and why: each candidate setting's MRR on the pseudo-requests."""

    chosen: dict[str, Any] = field(default_factory=dict)
    scores: list[dict[str, Any]] = field(default_factory=list)
    pseudo_requests: int = 0
    seconds: float = 0.0


def pseudo_requests(catalog: Catalog, n: int = 256, n_words: int = 12, seed: int = 0) -> list[tuple[str, str]]:
    """``(API id, pseudo-request)`` for ``n`` APIs drawn from ``catalog`` (those with a description).

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> pseudo_requests(tiny_catalog(), n=2, seed=1)[0][1].split()[0]
        'Delete'
    """
    ids = [s.id for s in catalog if s.description.strip()]
    if not ids:
        return []
    rng = np.random.default_rng(seed)
    drawn = sorted(rng.choice(len(ids), min(n, len(ids)), replace=False))
    out = []
    for i in drawn:
        spec = catalog[ids[int(i)]]
        own = set(words(spec.name)) | set(words(spec.tool or ""))
        kept = [w for w in spec.description.split() if not set(words(w)) & own] or spec.description.split()
        out.append((spec.id, " ".join(kept[:n_words])))
    return out


def mrr(first_stage: FirstStage, requests: Sequence[tuple[str, str]], depth: int = 50) -> float:
    """Mean reciprocal rank of each pseudo-request's own API in ``first_stage``'s ranking (0 when not found)."""
    if not requests:
        return 0.0
    hits = first_stage.search([text for _, text in requests], depth)
    total = 0.0
    for (source, _), found in zip(requests, hits):
        rank = next((r for r, h in enumerate(found, start=1) if h.id == source), None)
        total += 1.0 / rank if rank else 0.0
    return total / len(requests)


def choose(
    config: Any,
    catalog: Catalog,
    make_part: Callable[[Any, str], FirstStage],
    *,
    n: int = 256,
    seed: int = 0,
) -> tuple[Any, AutoTuneReport]:
    """``config`` with each knob of ``config.auto_tune`` set to the candidate whose first stage ranks the
    pseudo-requests best; ``make_part(config, name)`` builds and indexes a first-stage part (``dense``, ``bm25``)
    for a config. Returns the resolved config and the report."""
    from toolrerank_plugins.retrieval.hybrid import HybridConfig, HybridRetriever

    t0 = time.perf_counter()
    knobs = [k for k in config.auto_tune if k in AUTO_KNOBS and not _chosen_by_user(config, k)]
    if config.retriever != "hybrid" or list(config.hybrid.parts) != ["dense", "bm25"]:
        # fusion is tuned over the built-in parts only (a plug-in's parts, e.g. PostgreSQL's, keep their setting)
        knobs = [k for k in knobs if not k.startswith("hybrid.")]
    if config.retriever not in ("hybrid", "bm25"):
        knobs = [k for k in knobs if not k.startswith("bm25.")]
    report = AutoTuneReport()
    if not knobs:
        return config, report
    requests = pseudo_requests(catalog, n=n, seed=seed)
    report.pseudo_requests = len(requests)
    dense = make_part(config, "dense") if config.retriever == "hybrid" else None
    bm25_parts: dict[Any, FirstStage] = {}
    best: tuple[float, dict[str, Any]] | None = None
    current = {k: _get(config, k) for k in knobs}
    for values in product(*(AUTO_KNOBS[k] for k in knobs)):
        setting = dict(zip(knobs, values))
        candidate = _set(config, setting)
        stem = candidate.bm25.stemmer
        if stem not in bm25_parts:
            bm25_parts[stem] = make_part(candidate, "bm25")
        if candidate.retriever == "hybrid":
            assert dense is not None
            hybrid_cfg = HybridConfig.model_validate({**candidate.hybrid.model_dump(), "parts": ["dense", "bm25"]})
            stage: FirstStage = HybridRetriever(hybrid_cfg, parts={"dense": dense, "bm25": bm25_parts[stem]})
        else:
            stage = bm25_parts[stem]
        score = mrr(stage, requests)
        report.scores.append({**setting, "mrr": round(score, 4)})
        # a tie keeps the configured value: strictly better wins, and the configured setting is scored as is
        if best is None or score > best[0] + 1e-9 or (abs(score - best[0]) <= 1e-9 and setting == current):
            best = (score, setting)
    assert best is not None
    report.chosen = best[1]
    report.seconds = round(time.perf_counter() - t0, 2)
    logger.info("auto_tune chose %s on %d pseudo-requests (%s)", best[1], len(requests), report.scores)
    return _set(config, best[1]), report


def _chosen_by_user(config: Any, knob: str) -> bool:
    """A knob set explicitly to something other than its default (``hybrid={"fusion": "rrf"}``) is the user's
    choice and is not tuned; the default value, given or not, is tuned."""
    section, key = knob.split(".")
    part = getattr(config, section)
    return key in part.model_fields_set and getattr(part, key) != type(part).model_fields[key].default


def _get(config: Any, knob: str) -> Any:
    section, key = knob.split(".")
    return getattr(getattr(config, section), key)


def _set(config: Any, setting: Mapping[str, Any]) -> Any:
    """``config`` with each knob's section validated afresh with its value; the rest of the config is not
    validated again here (its stages' parameters are checked when the engine builds them, with a ConfigError)."""
    sections: dict[str, Any] = {}
    for knob, value in setting.items():
        section, key = knob.split(".")
        part = sections.get(section, getattr(config, section))
        sections[section] = type(part).model_validate({**part.model_dump(), key: value})
    return config.model_copy(update=sections)


def make_part(config: Any, name: str, catalog: Catalog, embedder: Any, cache: dict[str, Any] | None) -> FirstStage:
    """A built-in ``dense`` or ``bm25`` part of ``config`` indexed over ``catalog`` (``cache`` spares texts
    already encoded)."""
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever
    from toolrerank_plugins.retrieval.dense import DenseRetriever

    ids = catalog.ids
    texts = [render_tool(catalog[i], config.render) for i in ids]
    part: FirstStage
    if name == "dense":
        part = DenseRetriever(config.dense, embedder=embedder)
        part.index(ids, texts, cache=cache)
    else:
        part = BM25Retriever(config.bm25)
        part.index(ids, texts)
    return part
