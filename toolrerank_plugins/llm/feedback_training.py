"""Iteration-aware feedback training of our bi-encoder (Xu et al., Sec. 4.3) on iterative-feedback traces.

Every round t of every trace gives examples ``("Iteration t: " + q_t, relevant API text)`` with hard
negatives drawn at random from that round's retrieved top-K (APIs that are not relevant). The loss is the
paper's joint loss over rounds, ``sum_t alpha**t * L(q_t)``, where L is the contrastive loss of their Eq. 6:
in-batch negatives plus the hard negatives (each batch holds one round, so alpha scales whole batches).
Other relevant APIs of the same query are masked out of the in-batch negatives.

The result is a sentence-transformers folder (``save_pretrained``) plus ``toolrerank_feedback.json``;
point ``dense.model_name_or_path`` at it and the ``iterative_feedback`` stage switches the prefix on.
Traces come from :func:`toolrerank_plugins.llm.datagen.generate_feedback_traces` (any LLM).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins._extras import require
from toolrerank_plugins._version import __version__
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.llm.feedback import DEFAULT_PREFIX, FEEDBACK_MARKER, with_iteration
from toolrerank_plugins.render import RenderConfig, render_tool

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeedbackExample:
    round: int
    anchor: str
    positive: str
    negatives: tuple[str, ...]
    relevant_texts: frozenset[str]


@dataclass
class TrainReport:
    output_path: str
    examples: int
    examples_per_round: dict[int, int]
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_path": self.output_path,
            "examples": self.examples,
            "examples_per_round": self.examples_per_round,
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
        }


def build_examples(
    traces: Sequence[dict[str, Any]],
    catalog: Catalog,
    *,
    render: RenderConfig | None = None,
    hard_negatives: int = 1,
    prefix_format: str = DEFAULT_PREFIX,
    seed: int = 0,
) -> list[FeedbackExample]:
    """Training examples from traces (rows of ``generate_feedback_traces``); unknown ids are skipped."""
    rng = random.Random(seed)
    rc = render or RenderConfig()
    text_of: dict[str, str] = {}

    def text(tid: str) -> str | None:
        if tid not in text_of:
            spec = catalog.get(tid)
            if spec is None:
                return None
            text_of[tid] = render_tool(spec, rc)
        return text_of[tid]

    out: list[FeedbackExample] = []
    for tr in traces:
        relevant = [r for r in tr.get("relevant", []) if catalog.get(r) is not None]
        if not relevant:
            continue
        rel_texts = frozenset(t for t in (text(r) for r in relevant) if t)
        for rnd in tr.get("rounds", []):
            t, q = int(rnd["round"]), str(rnd["query"])
            pool = [i for i in rnd.get("ranking", []) if i not in set(relevant) and catalog.get(i) is not None]
            for rel in relevant:
                pos = text(rel)
                if pos is None:
                    continue
                negs = rng.sample(pool, min(hard_negatives, len(pool))) if pool else []
                out.append(
                    FeedbackExample(
                        t,
                        with_iteration(q, t, prefix_format),
                        pos,
                        tuple(x for x in (text(n) for n in negs) if x),
                        rel_texts,
                    )
                )
    return out


def train_feedback_retriever(
    traces: Sequence[dict[str, Any]],
    catalog: Catalog,
    output_path: str | Path,
    *,
    base_model: str = "default",
    render: RenderConfig | None = None,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 2e-5,
    warmup_steps: int = 0,
    alpha: float = 1.0,
    hard_negatives: int = 1,
    scale: float = 20.0,
    max_steps: int | None = None,
    max_length: int = 128,
    prefix_format: str = DEFAULT_PREFIX,
    device: str | None = "auto",
    seed: int = 0,
    overwrite: bool = False,
) -> TrainReport:
    """Fine-tune the bi-encoder on feedback traces (see the module docstring) and save it.

    Paper defaults: alpha=1, one hard negative from the top-K=10, lr 2e-5 (their batch size 64).
    """
    out = Path(output_path)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"{out} exists and is not empty; pass overwrite=True or choose another folder")
    torch = require("torch")
    st = require("sentence_transformers")
    from toolrerank_plugins.device import resolve_device
    from toolrerank_plugins.encoders import resolve_model_path

    examples = build_examples(
        traces, catalog, render=render, hard_negatives=hard_negatives, prefix_format=prefix_format, seed=seed
    )
    if not examples:
        raise ConfigError("no training examples: traces need relevant ids present in the catalog and rounds")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = st.SentenceTransformer(resolve_model_path(base_model), device=resolve_device(device), local_files_only=True)
    model.max_seq_length = max_length
    dev = model.device
    encode_inputs = getattr(model, "preprocess", None) or model.tokenize

    by_round: dict[int, list[FeedbackExample]] = {}
    for ex in examples:
        by_round.setdefault(ex.round, []).append(ex)
    batches: list[tuple[int, list[FeedbackExample]]] = []
    for _ in range(epochs):
        epoch: list[tuple[int, list[FeedbackExample]]] = []
        for t, exs in by_round.items():
            exs = exs[:]
            rng.shuffle(exs)
            epoch.extend((t, exs[i : i + batch_size]) for i in range(0, len(exs), batch_size))
        rng.shuffle(epoch)
        batches.extend(epoch)
    if max_steps is not None:
        batches = batches[:max_steps]

    def embed(texts: list[str]) -> Any:
        feats = encode_inputs(texts)
        feats = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in feats.items()}
        emb = model(feats)["sentence_embedding"]
        return torch.nn.functional.normalize(emb, dim=-1)

    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    )
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    for step, (t, batch) in enumerate(batches):
        anchors = [e.anchor for e in batch]
        docs = [e.positive for e in batch]
        for e in batch:
            docs.extend(e.negatives)
        a = embed(anchors)
        d = embed(docs)
        sims = scale * a @ d.T
        # another example's positive that is also relevant to this anchor is not a negative
        mask = torch.zeros_like(sims, dtype=torch.bool)
        for i, e in enumerate(batch):
            for j, doc in enumerate(docs):
                if j != i and doc in e.relevant_texts:
                    mask[i, j] = True
        sims = sims.masked_fill(mask, float("-inf"))
        labels = torch.arange(len(batch), device=sims.device)
        loss = (alpha**t) * torch.nn.functional.cross_entropy(sims, labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0:
            logger.info("feedback training step %d/%d loss %.4f", step + 1, len(batches), losses[-1])
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    counts = {t: len(v) for t, v in sorted(by_round.items())}
    write_atomic(
        out / FEEDBACK_MARKER,
        json.dumps(
            {
                "prefix_format": prefix_format,
                "alpha": alpha,
                "hard_negatives": hard_negatives,
                "examples_per_round": counts,
                "steps": len(batches),
                "base_model": str(base_model),
                "library_version": __version__,
            },
            indent=1,
        ),
    )
    return TrainReport(str(out), len(examples), counts, len(batches), time.perf_counter() - t0, losses)
