"""Training sources for the reranker: benchmark folders, their first stages, and the pairs mined from them.

Shared by ``toolrerank train reranker`` / ``toolrerank tune`` and the per-source training benchmark
(``benchmarks/toolrerank_train_sources.py``). Progress goes to ``logging``; the CLI passes ``report`` to print it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins.errors import ConfigError

if TYPE_CHECKING:
    from toolrerank_plugins.rerank.training import Pair, TrainingSource

logger = logging.getLogger(__name__)


def engine_map(items: Sequence[str] | None) -> dict[str, str]:
    """``DATA_DIR=ENGINE_DIR`` items (``--engine``, repeatable) as ``{resolved data dir: engine dir}``.

    Example:
        >>> list(engine_map(["data/toolbench=/engines/tb"]).values())
        ['/engines/tb']
    """
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--engine expects DATA_DIR=ENGINE_DIR, got {item!r}")
        data, eng = item.split("=", 1)
        out[str(Path(data).resolve())] = eng
    return out


def load_source(data_dir: str, split: str | None, engine_dir: str | None, first_stage: str) -> TrainingSource:
    """Catalog + first-stage engine (loaded, or built in memory) + queries of one benchmark folder."""
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.loaders import load_catalog_file, load_queries
    from toolrerank_plugins.rerank.training import TrainingSource

    path = Path(data_dir)
    if engine_dir:
        engine = Engine.load(engine_dir)
    else:
        t = time.perf_counter()
        # a folder, or a catalog file of any format (`toolrerank tune --catalog spec.yaml --queries ...`)
        engine = Engine.build(load_catalog_file(path), EngineConfig(retriever=first_stage))  # type: ignore[arg-type]
        logger.info("built %s first stage over %s in %.1fs", first_stage, path, time.perf_counter() - t)
    queries = load_queries(path, split=split) if (path / "queries.jsonl").exists() else []
    return TrainingSource(path.name, engine.catalog, engine, queries)


def source_loader(split: str | None, engines: dict[str, str], first_stage: str) -> Callable[[str], TrainingSource]:
    """``folder -> TrainingSource``, loading each benchmark folder (and its first stage) once."""
    cache: dict[str, TrainingSource] = {}

    def source(d: str) -> TrainingSource:
        key = str(Path(d).resolve())
        if key not in cache:
            cache[key] = load_source(d, split, engines.get(key), first_stage)
        return cache[key]

    return source


def collect_pairs(
    source: Callable[[str], TrainingSource],
    labelled: Sequence[tuple[str, int | None, int]],
    pseudo: Sequence[tuple[str, int, int]] = (),
    *,
    negative_depth: int,
    seed: int,
    mask_description: bool = False,
    report: Callable[[str], None] | None = None,
) -> tuple[list[Pair], set[str], dict[str, Any]]:
    """Training pairs from each source: ``labelled`` = (folder, max queries, negatives per query),
    ``pseudo`` = (folder, APIs, negatives per pseudo-query). Returns the pairs, the seen tools and a
    per-source recipe for the model's metadata. One line per source goes to ``report`` (default: INFO log)."""
    from toolrerank_plugins.rerank.training import labelled_pairs, pseudo_query_pairs

    say = report or logger.info
    pairs: list[Pair] = []
    seen: set[str] = set()
    recipe: dict[str, Any] = {}
    for d, max_queries, negatives in labelled:
        src = source(d)
        p, s = labelled_pairs(
            src, negatives_per_query=negatives, negative_depth=negative_depth, max_queries=max_queries, seed=seed
        )
        pairs += p
        seen |= s
        n_queries = min(len(src.queries), max_queries or len(src.queries))
        recipe[src.name] = {"labelled_queries": n_queries, "negatives": negatives}
        say(f"{src.name}: {len(p)} labelled pairs from {len(src.queries)} queries, {len(s)} seen tools")
    for d, n_apis, negatives in pseudo:
        src = source(d)
        p = pseudo_query_pairs(
            src, n_apis=n_apis, negatives_per_query=negatives, seed=seed, mask_description=mask_description
        )
        pairs += p
        entry = recipe.setdefault(src.name, {})
        entry["pseudo_queries"] = n_apis
        if mask_description:
            entry["pseudo_mask_description"] = True
        say(f"{src.name}: {len(p)} pseudo-query pairs from {min(n_apis, len(src.catalog))} APIs")
    return pairs, seen, recipe
