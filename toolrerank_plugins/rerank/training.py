"""Training data and training loops for the reranker and the query-type classifier.

Reranker data (the paper's recipe, plus what helps when labelled queries are scarce):

* **labelled pairs**: (query, relevant API) positives from a train split, and *hard negatives*: the
  first-stage retriever's top candidates that are not relevant;
* **pseudo-queries** mined from a catalog itself: an API's description (or its humanised name) stands
  in for a user query, its own rendered text is the positive, and first-stage hits for that text plus
  sibling APIs of the same tool are the negatives. This teaches the domain and the within-tool choice
  without labels. Pseudo-queries do not mark tools as *seen*: only labelled training queries do.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins._extras import require
from toolrerank_plugins._optim import head_param_groups
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.records import LabelledQuery

if TYPE_CHECKING:
    from toolrerank_plugins.engine import Engine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pair:
    """One training example for the cross-encoder."""

    query: str
    text: str
    label: float
    source: str


@dataclass
class TrainingSource:
    """A benchmark folder's catalog, its first-stage engine (for hard negatives) and its training queries."""

    name: str
    catalog: Catalog
    engine: Engine
    queries: list[LabelledQuery] = field(default_factory=list)


def labelled_pairs(
    source: TrainingSource,
    *,
    negatives_per_query: int = 6,
    negative_depth: int = 30,
    max_queries: int | None = None,
    seed: int = 0,
) -> tuple[list[Pair], set[str]]:
    """Positives from the labelled queries and hard negatives from the first stage.

    Half the negatives come from the top of the first-stage list (the hardest), the rest are sampled
    from deeper in it. Returns the pairs and the seen tool keys (tools of the positives).
    """
    rng = random.Random(seed)
    queries = [q for q in source.queries if any(r in source.catalog for r in q.relevant)]
    if max_queries is not None and len(queries) > max_queries:
        queries = rng.sample(queries, max_queries)
    pairs: list[Pair] = []
    seen: set[str] = set()
    if not queries:
        return pairs, seen
    hits = source.engine.retrieve([q.query for q in queries], negative_depth)
    for q, cands in zip(queries, hits):
        relevant = [source.catalog[r] for r in q.relevant if r in source.catalog]
        for spec in relevant:
            pairs.append(Pair(q.query, source.engine.render(spec), 1.0, source.name))
            seen.add(spec.tool_key)
        rel_ids = {s.id for s in relevant}
        negs = [c.tool for c in cands if c.id not in rel_ids]
        hard = negs[: negatives_per_query // 2]
        deep = negs[negatives_per_query // 2 :]
        pick = hard + rng.sample(deep, min(len(deep), negatives_per_query - len(hard)))
        pairs.extend(Pair(q.query, source.engine.render(s), 0.0, source.name) for s in pick)
    return pairs, seen


def _humanise(name: str) -> str:
    name = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return " ".join(re.sub(r"[_\-/.]+", " ", name).split()).lower()


def pseudo_query(spec: Any, max_chars: int = 200) -> str:
    """A user-like request made from an API's own documentation (description, else its name)."""
    desc = " ".join((spec.description or "").split())
    if len(desc) >= 20:
        return desc[:max_chars]
    base = _humanise(spec.name)
    tool = _humanise(spec.tool) if spec.tool else ""
    return f"{base} {('with ' + tool) if tool else ''} {desc}".strip()[:max_chars]


def pseudo_query_pairs(
    source: TrainingSource,
    *,
    n_apis: int = 2000,
    negatives_per_query: int = 4,
    negative_depth: int = 20,
    seed: int = 0,
    mask_description: bool = False,
) -> list[Pair]:
    """Pairs mined from the catalog alone: pseudo-query -> its API (+), first-stage hits and siblings (-).

    ``mask_description``: render the APIs of these pairs *without* their descriptions. The pseudo-query is
    the positive's own description, so with it in the text the model can learn to spot a copied string
    (which BM25 already does); masked, it has to match the request to the API's name, parameters and tool.
    """
    rng = random.Random(seed)
    render = source.engine.render
    if mask_description:
        from toolrerank_plugins.render import render_tool

        cfg = source.engine.config.render
        masked = cfg.model_copy(update={"fields": [f for f in cfg.fields if f != "description"]})

        def render(spec: Any) -> str:
            return render_tool(spec, masked)

    specs = list(source.catalog)
    if not specs:
        return []
    specs = rng.sample(specs, min(n_apis, len(specs)))
    queries = [pseudo_query(s) for s in specs]
    hits = source.engine.retrieve(queries, negative_depth)
    tools = source.catalog.tools()
    pairs: list[Pair] = []
    for spec, q, cands in zip(specs, queries, hits):
        pairs.append(Pair(q, render(spec), 1.0, f"{source.name}:pseudo"))
        siblings = [s for s in tools.get(spec.tool_key, []) if s.id != spec.id]
        negs = [c.tool for c in cands if c.id != spec.id][: negatives_per_query - 1]
        if siblings:
            negs.append(rng.choice(siblings))
        else:
            negs = [c.tool for c in cands if c.id != spec.id][:negatives_per_query]
        pairs.extend(Pair(q, render(s), 0.0, f"{source.name}:pseudo") for s in negs)
    return pairs


def train_cross_encoder(
    pairs: Sequence[Pair],
    out_dir: str | Path,
    *,
    base_model: str | None = "default",
    seen_tools: Sequence[str] = (),
    max_length: int = 128,
    batch_size: int = 32,
    epochs: int = 1,
    lr: float = 5e-5,
    head_lr: float | None = None,
    warmup_ratio: float = 0.1,
    seed: int = 0,
    time_budget_s: float | None = None,
    device: str | None = "auto",
    threads: int | None = None,
    num_layers: int | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fine-tune a sentence-transformers CrossEncoder (binary cross-entropy) and save it to ``out_dir``.

    Starts from ``base_model`` (default: the bundled MiniLM, with a fresh 1-logit head). Stops early,
    saving what it has, when ``time_budget_s`` runs out. Returns training facts (also recorded in
    ``toolrerank_reranker.json`` next to the weights, together with ``seen_tools``).
    ``head_lr``: learning rate of the freshly initialised scoring head (and BERT pooler); ``None`` uses
    ``lr``. With a few hundred steps, a head at the encoder's small ``lr`` barely leaves its initialisation.
    ``num_layers`` keeps only the first N transformer layers (a faster, smaller reranker: on a 2-core
    CPU the full 6-layer MiniLM cannot score 30 candidates in 150 ms).
    """
    if not pairs:
        raise ValueError("no training pairs; give labelled queries (--data) or pseudo-queries")
    torch = require("torch")
    st = require("sentence_transformers")
    from toolrerank_plugins.device import resolve_device
    from toolrerank_plugins.encoders import resolve_model_path
    from toolrerank_plugins.rerank.cross_encoder import write_reranker_meta

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    dev = resolve_device(device)
    base = resolve_model_path(base_model)
    ce = st.CrossEncoder(base, num_labels=1, max_length=max_length, local_files_only=True, device=dev)
    model, tok = ce.model, ce.tokenizer
    if num_layers is not None:
        _truncate_layers(model, num_layers)
    model.train()
    data = list(pairs)
    rng = random.Random(seed)
    steps_per_epoch = (len(data) + batch_size - 1) // batch_size
    total = steps_per_epoch * epochs
    opt = torch.optim.AdamW(head_param_groups(model, lr, head_lr), lr=lr, weight_decay=0.01)
    warm = max(1, int(total * warmup_ratio))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / max(1, total - warm))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    t0 = time.perf_counter()
    step = 0
    losses: list[float] = []
    stopped_early = False
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="train reranker", disable=not logger.isEnabledFor(logging.INFO))
    for _epoch in range(epochs):
        rng.shuffle(data)
        for i in range(0, len(data), batch_size):
            batch = data[i : i + batch_size]
            enc = tok(
                [p.query for p in batch],
                [p.text for p in batch],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            ).to(dev)
            logits = model(**enc).logits.view(-1)
            loss = loss_fn(logits, torch.tensor([p.label for p in batch], device=dev))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            losses.append(float(loss.detach()))
            bar.update(1)
            if step % 50 == 0:
                logger.info("step %d/%d loss %.4f", step, total, sum(losses[-50:]) / len(losses[-50:]))
            if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                stopped_early = True
                break
        if stopped_early:
            logger.warning("time budget of %.0fs reached after %d/%d steps; saving", time_budget_s, step, total)
            break
    bar.close()
    model.eval()
    secs = time.perf_counter() - t0
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ce.save(str(out))
    by_source: dict[str, int] = {}
    for p in pairs:
        by_source[p.source] = by_source.get(p.source, 0) + 1
    facts = {
        "base_model": str(base_model),
        "max_length": max_length,
        "num_layers": int(model.config.num_hidden_layers),
        "batch_size": batch_size,
        "epochs": epochs,
        "lr": lr,
        "head_lr": lr if head_lr is None else head_lr,
        "steps": step,
        "steps_planned": total,
        "stopped_early": stopped_early,
        "train_seconds": round(secs, 1),
        "n_pairs": len(pairs),
        "n_positive": sum(p.label > 0.5 for p in pairs),
        "pairs_by_source": by_source,
        "final_loss_mean_last50": sum(losses[-50:]) / max(1, len(losses[-50:])),
        **(extra_meta or {}),
    }
    write_reranker_meta(out, seen_tools=seen_tools, **facts)
    return facts


def classifier_training_set(
    sources: Sequence[TrainingSource], *, max_per_source: int | None = 600, seed: int = 0
) -> tuple[list[str], list[str]]:
    """(queries, labels) with labels from the number of distinct tools among each query's relevant APIs."""
    from toolrerank_plugins.rerank.classifier import query_type

    rng = random.Random(seed)
    texts: list[str] = []
    labels: list[str] = []
    for src in sources:
        qs = list(src.queries)
        if max_per_source is not None and len(qs) > max_per_source:
            qs = rng.sample(qs, max_per_source)
        for q in qs:
            texts.append(q.query)
            labels.append(query_type(q, src.catalog))
    return texts, labels


def _truncate_layers(model: Any, num_layers: int) -> None:
    """Keep the first ``num_layers`` encoder layers of a BERT-style model (config updated, so it saves/loads)."""
    encoder: Any = getattr(getattr(model, model.base_model_prefix, model), "encoder", None)
    layers = getattr(encoder, "layer", None)
    if encoder is None or layers is None:
        raise ValueError(f"cannot truncate layers of {type(model).__name__}: no encoder.layer list")
    if not 1 <= num_layers <= len(layers):
        raise ValueError(f"num_layers must be in 1..{len(layers)}, got {num_layers}")
    encoder.layer = layers[:num_layers]
    model.config.num_hidden_layers = num_layers
