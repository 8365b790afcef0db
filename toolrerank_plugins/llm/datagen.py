"""Training-data generators for the LLM stages (the LLM training itself happens elsewhere).

- :func:`generate_qta_dpo_pairs`: QTA's DPO pairs. Per annotated query, sample rewrites at a high
  temperature, score each (and the original query) with the DCG-style :func:`qta_reward` on the frozen
  retriever's ranking, and write the best as ``chosen``, the worst as ``rejected``, with the shared prompt —
  the ``prompt`` / ``chosen`` / ``rejected`` JSONL that DPO trainers (e.g. TRL's ``DPOTrainer``) read.
- :func:`rejection_sampling`: Kachuee et al.'s alignment data. N drafts per query, reward MMRR (their Eq. 2)
  of the interleaved retrieval the stage would do, keep the best ``top_n`` at or above ``min_reward``, then
  only drafts within the top ``percentile`` of all rewards; written as ``prompt`` / ``completion`` SFT JSONL.
- :func:`generate_feedback_traces`: iterative-feedback traces (per-round queries and rankings) of labelled
  queries, the input of :func:`toolrerank_plugins.llm.feedback_training.train_feedback_retriever`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolrerank_plugins._atomic import atomic_open
from toolrerank_plugins.llm.base import LLM, LLMError
from toolrerank_plugins.llm.feedback import FeedbackConfig, FeedbackStage
from toolrerank_plugins.llm.parsing import clip, parse_query_list, parse_rewrite
from toolrerank_plugins.llm.qta import QTAConfig, QTAStage, sample_tools
from toolrerank_plugins.llm.query_generation import QueryGenerationConfig, QueryGenerationStage, interleave
from toolrerank_plugins.llm.runtime import LLMRuntime, RuntimeConfig
from toolrerank_plugins.metrics import mmrr
from toolrerank_plugins.records import LabelledQuery, replace_surrogates

if TYPE_CHECKING:
    from toolrerank_plugins.engine import Engine

logger = logging.getLogger(__name__)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows as JSON lines (UTF-8, atomically); returns the count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_open(p, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _session_runtime(base: RuntimeConfig, calls: int) -> LLMRuntime:
    cfg = base.model_copy(update={"max_calls_per_query": max(base.max_calls_per_query, calls)})
    cfg = cfg.model_copy(update={"max_prompt_tokens_per_query": max(cfg.max_prompt_tokens_per_query, 4000 * calls)})
    return LLMRuntime(cfg)


# -- QTA -----------------------------------------------------------------------------------------------
def qta_reward(ranks: Sequence[int | None], k: int = 5, depth: int = 100) -> float:
    """QTA's ranking function (their Eq. 4, constants ours): summed over the gold tools' 1-based ranks.

    Inside the top ``k`` a tool earns ``1 + 1/log2(r+1)`` — more than DCG's ``1/log2(r+1)``; outside it
    costs ``-log2(r-k+1)``, a penalty growing with the rank. A tool not retrieved within ``depth`` counts at
    rank ``depth+1``. (The paper's text lost its exact constants; this keeps the shape it describes.)

    Example:
        >>> qta_reward([1]) > qta_reward([5]) > 0 > qta_reward([6]) > qta_reward([None])
        True
    """
    total = 0.0
    for r in ranks:
        rank = depth + 1 if r is None or r > depth else int(r)
        if rank <= k:
            total += 1.0 + 1.0 / math.log2(rank + 1)
        else:
            total -= math.log2(rank - k + 1)
    return total


def _ranks(ranking_ids: Sequence[str], relevant: Sequence[str]) -> list[int | None]:
    pos = {tid: i for i, tid in reversed(list(enumerate(ranking_ids, start=1)))}
    return [pos.get(r) for r in relevant]


def generate_qta_dpo_pairs(
    engine: Engine,
    queries: Sequence[LabelledQuery],
    llm: LLM,
    *,
    config: QTAConfig | None = None,
    n_samples: int = 2,
    pairs_per_query: int = 1,
    temperature: float = 1.0,
    k: int = 5,
    depth: int = 100,
    include_original: bool = True,
) -> list[dict[str, Any]]:
    """DPO pairs for QTA (see the module docstring).

    Each of ``pairs_per_query`` rounds shows a different random tool sample (seed + round), asks for
    ``n_samples`` rewrites of the same prompt, and pairs the best-scored candidate with the worst (the
    original query competes when ``include_original``). Unusable answers (refusals, garbage) compete as
    rejected candidates with the worst score. Rounds whose best and worst tie are skipped.
    """
    if n_samples < 1 or (n_samples < 2 and not include_original):
        raise ValueError("need at least two candidates per pair: n_samples >= 2, or include_original")
    cfg = config or QTAConfig()
    stage = QTAStage(cfg, llm=llm)
    rows: list[dict[str, Any]] = []
    for q in queries:
        if not q.relevant:
            continue
        runtime = _session_runtime(cfg.runtime, n_samples * pairs_per_query)
        session = runtime.session(llm)
        worst = qta_reward([None] * len(q.relevant), k, depth)
        for m in range(pairs_per_query):
            tools = (
                [s.tool for s in engine.retrieve([q.query], cfg.n_tools)[0]]
                if cfg.sample == "top"
                else sample_tools(engine.context, q.query, cfg.n_tools, cfg.seed + m)
            )
            prompt = stage.prompt_for(q.query, tools)
            outs = session.complete_many([prompt] * n_samples, temperature=temperature, max_tokens=cfg.max_tokens)
            cands: list[tuple[float, str, str]] = []  # (reward, text, kind)
            usable: list[str] = []
            for out in outs:
                if isinstance(out, LLMError):
                    continue
                parsed = parse_rewrite(out, max_chars=cfg.max_query_chars)
                if parsed.text is None:
                    cands.append((worst - 1.0, clip(out, cfg.max_query_chars * 2) or "(empty)", "unusable"))
                else:
                    usable.append(parsed.text)
            texts = usable + ([q.query] if include_original else [])
            if texts:
                rankings = engine.retrieve(texts, depth)
                for text, ranking in zip(texts, rankings):
                    reward = qta_reward(_ranks([s.id for s in ranking], q.relevant), k, depth)
                    kind = "original" if include_original and text is texts[-1] and text == q.query else "rewrite"
                    cands.append((reward, text, kind))
            if len(cands) < 2:
                continue
            cands.sort(key=lambda c: c[0], reverse=True)
            best, low = cands[0], cands[-1]
            if best[0] <= low[0] or best[1] == low[1]:
                continue
            rows.append(
                {
                    "prompt": prompt,
                    "chosen": best[1],
                    "rejected": low[1],
                    "chosen_reward": round(best[0], 6),
                    "rejected_reward": round(low[0], 6),
                    "chosen_kind": best[2],
                    "rejected_kind": low[2],
                    "query_id": q.id,
                    "round": m,
                }
            )
    return rows


# -- Kachuee rejection sampling --------------------------------------------------------------------------
def rejection_sampling(
    engine: Engine,
    queries: Sequence[LabelledQuery],
    llm: LLM,
    *,
    config: QueryGenerationConfig | None = None,
    n_drafts: int = 8,
    temperature: float = 1.0,
    k: int = 10,
    top_n: int = 1,
    min_reward: float = 0.05,
    percentile: float = 100.0,
) -> list[dict[str, Any]]:
    """SFT data by rejection sampling (see the module docstring); rows sorted by query, best first.

    The reward is MMRR@k of the ranking the ``query_generation`` stage would return for the draft
    (per-line retrieval, interleaved, the original utterance last when ``config.include_original``).
    """
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    cfg = config or QueryGenerationConfig()
    stage = QueryGenerationStage(cfg, llm=llm)
    kept: list[dict[str, Any]] = []
    for q in queries:
        if not q.relevant:
            continue
        session = _session_runtime(cfg.runtime, n_drafts).session(llm)
        prompt = stage.prompt_for(q.query)
        outs = session.complete_many([prompt] * n_drafts, temperature=temperature, max_tokens=cfg.max_tokens)
        original = engine.retrieve([q.query], k)[0] if cfg.include_original else []
        scored: list[tuple[float, str]] = []
        for out in outs:
            if isinstance(out, LLMError):
                continue
            parsed = parse_query_list(out, max_items=cfg.max_queries, max_chars=cfg.max_query_chars)
            if parsed.status != "ok":
                continue
            # LLM-made text: a lone surrogate (not valid text) becomes U+FFFD, as in StageContext.retrieve
            items = [replace_surrogates(q) for q in parsed.items]
            lists = engine.retrieve(items, k) + ([original] if cfg.include_original else [])
            ranking = [s.id for s in interleave(lists, k)]
            scored.append((mmrr(ranking, q.relevant, k), "\n".join(parsed.items)))
        scored.sort(key=lambda x: x[0], reverse=True)
        seen: set[str] = set()
        for rank, (reward, text) in enumerate(scored):
            if len(seen) >= top_n:
                break
            if reward < min_reward or text in seen:
                continue
            seen.add(text)
            kept.append(
                {
                    "prompt": prompt,
                    "completion": text,
                    "reward": round(reward, 6),
                    "query_id": q.id,
                    "draft_rank": rank + 1,
                    "n_drafts": n_drafts,
                }
            )
    if kept and percentile < 100:
        cut = float(np.percentile([r["reward"] for r in kept], 100 - percentile))
        kept = [r for r in kept if r["reward"] >= cut]
    return kept


# -- iterative feedback traces ----------------------------------------------------------------------------
def generate_feedback_traces(
    engine: Engine,
    queries: Sequence[LabelledQuery],
    llm: LLM,
    *,
    config: FeedbackConfig | None = None,
) -> list[dict[str, Any]]:
    """Run the ``iterative_feedback`` stage on labelled queries and keep each round's query and top-K.

    Rows: ``{"query_id", "query", "relevant", "rounds": [{"round", "query", "ranking"}], "stop_reason",
    "fallback"}`` — the input of ``train_feedback_retriever``.
    """
    cfg = config or FeedbackConfig()
    stage = FeedbackStage(cfg, llm=llm)
    depth = max(cfg.n_tools, engine.config.depth)
    rows = []
    for q in queries:
        if not q.relevant:
            continue
        trace: dict[str, Any] = {}
        candidates = engine.retrieve([q.query], depth)[0]
        stage.run(q.query, candidates, engine.context, trace)
        rows.append(
            {
                "query_id": q.id,
                "query": q.query,
                "relevant": list(q.relevant),
                "rounds": [
                    {"round": r["round"], "query": r["query"], "ranking": r["ranking"]} for r in trace.get("rounds", [])
                ],
                "stop_reason": trace.get("stop_reason"),
                "fallback": trace.get("fallback"),
            }
        )
    return rows
