"""The dependency discriminator: a 3-class cross-encoder over ``[doc a] [SEP] [doc b]`` (TGR, Sec. 3.1).

Classes: ``0`` a depends on b, ``1`` no dependency, ``2`` b depends on a. Trained in two stages as in the
paper: a class-balanced pretraining set with plain cross-entropy (Eq. 1), then an imbalanced fine-tuning
set with the per-class averaged loss (Eq. 2), which weighs each class by ``1 / N_k`` within the batch so
that the rare dependency classes are not drowned by "no dependency".

Labelled pairs come from dependency edges (``edges.jsonl``) and from JSON-Schema data flow
(:class:`~toolrerank_plugins.graph.schema_deps.SchemaDependencyDetector`); negatives are sampled pairs
that are neither, half of them from the same tool or category (hard negatives).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import require
from toolrerank_plugins._optim import head_param_groups
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import resolve_model_path
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import Edge, ToolSpec
from toolrerank_plugins.render import RenderConfig, render_tool

logger = logging.getLogger(__name__)

A_DEPENDS_ON_B, NO_DEPENDENCY, B_DEPENDS_ON_A = 0, 1, 2
LABELS = ("a_depends_on_b", "none", "b_depends_on_a")
#: What the discriminator reads of an API: its own text and data contract, not the shared tool blurb.
PAIR_RENDER = RenderConfig(
    fields=("name", "description", "parameters", "returns"),
    max_description_chars=300,
    max_parameter_chars=40,
    max_parameters=8,
    max_chars=600,
)


def pair_text(spec: ToolSpec) -> str:
    return render_tool(spec, PAIR_RENDER)


@dataclass(frozen=True)
class LabelledPair:
    """One training / test pair: API ids, their texts and the 3-class label."""

    a: str
    b: str
    text_a: str
    text_b: str
    label: int
    source: str = ""


def make_pairs(
    catalog: Catalog,
    edges: Iterable[Edge],
    *,
    negatives_per_edge: float,
    seed: int = 0,
    source: str = "",
    exclude: Iterable[tuple[str, str]] = (),
) -> list[LabelledPair]:
    """Pairs for the 3-class task from ``catalog`` and its dependency ``edges``.

    Every edge ``s -> t`` (t depends on s) gives two positives, ``(t, s)`` labelled ``a_depends_on_b``
    and ``(s, t)`` labelled ``b_depends_on_a``. ``negatives_per_edge`` negatives are drawn per edge,
    half from the same tool/category when possible, never a pair linked by an edge or in ``exclude``.
    Use ``negatives_per_edge=1`` for the paper's balanced pretraining set (equal class sizes).
    """
    rng = random.Random(seed)
    pos = {(e.source, e.target) for e in edges if e.source != e.target and e.source in catalog and e.target in catalog}
    linked = pos | {(b, a) for a, b in pos} | set(exclude) | {(b, a) for a, b in exclude}
    texts: dict[str, str] = {}

    def text(tid: str) -> str:
        if tid not in texts:
            texts[tid] = pair_text(catalog[tid])
        return texts[tid]

    out: list[LabelledPair] = []
    for s, t in sorted(pos):
        out.append(LabelledPair(t, s, text(t), text(s), A_DEPENDS_ON_B, source))
        out.append(LabelledPair(s, t, text(s), text(t), B_DEPENDS_ON_A, source))
    ids = catalog.ids
    groups: dict[str, list[str]] = {}
    for spec in catalog:
        groups.setdefault(spec.category or spec.tool_key, []).append(spec.id)
    n_neg = int(round(negatives_per_edge * len(pos)))
    seen: set[tuple[str, str]] = set()
    tries = 0
    while len(seen) < n_neg and tries < 50 * max(1, n_neg) and len(ids) > 1:
        tries += 1
        anchor = rng.choice(ids)
        group = groups[catalog[anchor].category or catalog[anchor].tool_key]
        other = rng.choice(group) if len(seen) % 2 == 0 and len(group) > 1 else rng.choice(ids)
        pair = (anchor, other)
        if anchor == other or pair in linked or pair in seen or (other, anchor) in seen:
            continue
        seen.add(pair)
        out.append(LabelledPair(anchor, other, text(anchor), text(other), NO_DEPENDENCY, source))
    rng.shuffle(out)
    return out


def class_averaged_loss(logits: Any, labels: Any) -> Any:
    """Paper Eq. 2: sum over classes of the mean cross-entropy of that class's examples in the batch."""
    torch = require("torch")
    ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    total = logits.new_zeros(())
    for k in range(logits.shape[1]):
        mask = labels == k
        if bool(mask.any()):
            total = total + ce[mask].mean()
    return total


class TrainConfig(ConfigModel):
    """Two-stage training settings (kept small: a few minutes on CPU)."""

    model_config = ConfigDict(extra="forbid")

    pretrain_epochs: int = Field(1, ge=0)
    finetune_epochs: int = Field(1, ge=0)
    batch_size: int = Field(16, ge=1)
    learning_rate: float = Field(3e-5, gt=0)
    finetune_learning_rate: float = Field(2e-5, gt=0)
    head_learning_rate: float | None = Field(
        None, gt=0, description="learning rate of the fresh 3-class head and pooler (both stages); None: as the encoder"
    )
    max_length: int = Field(192, ge=16)
    weight_decay: float = 0.01
    warmup_ratio: float = Field(0.1, ge=0, le=1)
    seed: int = 0
    torch_threads: int | None = Field(2, ge=1)


def per_class_report(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, dict[str, float]]:
    """Precision / recall / F1 / support per class, plus the macro average of the two dependency classes."""
    y = np.asarray(labels)
    p = np.asarray(predicted)
    out: dict[str, dict[str, float]] = {}
    for k, name in enumerate(LABELS):
        tp = float(((p == k) & (y == k)).sum())
        prec = tp / max(1.0, float((p == k).sum()))
        rec = tp / max(1.0, float((y == k).sum()))
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        out[name] = {"precision": prec, "recall": rec, "f1": f1, "support": int((y == k).sum())}
    dep = [out[LABELS[A_DEPENDS_ON_B]], out[LABELS[B_DEPENDS_ON_A]]]
    out["dependency_macro"] = {m: float(np.mean([d[m] for d in dep])) for m in ("precision", "recall", "f1")}
    # "Is there an edge at all" (direction ignored): the quantity graph construction depends on.
    has_y, has_p = y != NO_DEPENDENCY, p != NO_DEPENDENCY
    tp = float((has_y & has_p).sum())
    prec = tp / max(1.0, float(has_p.sum()))
    rec = tp / max(1.0, float(has_y.sum()))
    out["edge_any_direction"] = {
        "precision": prec,
        "recall": rec,
        "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
    }
    return out


class DependencyDiscriminator:
    """3-class pair classifier (transformers ``AutoModelForSequenceClassification``), offline only.

    Args:
        model_name_or_path: a folder saved by :meth:`save`, or ``"default"`` for the bundled MiniLM (the
            classification head is then freshly initialised: train it before use).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"``.
        batch_size: prediction batch size.
        max_length: word pieces for the two documents together.
        model_kwargs: passed to ``from_pretrained``.
    """

    def __init__(
        self,
        model_name_or_path: str | Path = "default",
        *,
        device: str | None = "auto",
        batch_size: int = 64,
        max_length: int = 192,
        model_kwargs: dict[str, Any] | None = None,
    ) -> None:
        transformers = require("transformers")
        from toolrerank_plugins.device import resolve_device

        self.model_name_or_path = resolve_model_path(str(model_name_or_path))
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.max_length = max_length
        meta_file = Path(self.model_name_or_path) / "discriminator.json"
        self.trained = meta_file.exists()
        if self.trained:
            meta = read_json(meta_file, "discriminator metadata", error=ConfigError, advice="; retrain it")
            saved = meta.get("max_length", max_length) if isinstance(meta, dict) else None
            if type(saved) is not int:
                raise ConfigError(f"{meta_file}: corrupt discriminator metadata ('max_length' must be an integer)")
            self.max_length = saved
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_name_or_path, local_files_only=True)
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
            self.model_name_or_path,
            num_labels=3,
            local_files_only=True,
            id2label=dict(enumerate(LABELS)),
            label2id={n: i for i, n in enumerate(LABELS)},
            **(model_kwargs or {}),
        ).to(self.device)
        self.model.eval()

    def _batch(self, text_a: Sequence[str], text_b: Sequence[str]) -> Any:
        enc = self.tokenizer(
            list(text_a),
            list(text_b),
            truncation="longest_first",
            max_length=self.max_length,
            padding=True,
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in enc.items()}

    def predict_proba(self, pairs: Sequence[tuple[str, str]], *, batch_size: int | None = None) -> np.ndarray:
        """Class probabilities, shape ``(len(pairs), 3)``; inputs sorted by length for batching."""
        torch = require("torch")
        if not pairs:
            return np.zeros((0, 3), dtype=np.float32)
        bs = batch_size or self.batch_size
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = np.zeros((len(pairs), 3), dtype=np.float32)
        self.model.eval()
        with torch.inference_mode():
            for start in range(0, len(order), bs):
                idx = order[start : start + bs]
                enc = self._batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx])
                probs = torch.softmax(self.model(**enc).logits.float(), dim=-1).cpu().numpy()
                out[idx] = probs
        return out

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.predict_proba(pairs).argmax(axis=1)

    def evaluate(self, pairs: Sequence[LabelledPair]) -> dict[str, dict[str, float]]:
        pred = self.predict([(p.text_a, p.text_b) for p in pairs])
        return per_class_report([p.label for p in pairs], list(pred))

    # -- training --------------------------------------------------------------------------------
    def _train_stage(
        self,
        pairs: Sequence[LabelledPair],
        *,
        epochs: int,
        lr: float,
        cfg: TrainConfig,
        loss_fn: Callable[[Any, Any], Any],
        stage: str,
    ) -> None:
        torch = require("torch")
        transformers = require("transformers")
        if not pairs or epochs == 0:
            return
        self.model.train()
        opt = torch.optim.AdamW(
            head_param_groups(self.model, lr, cfg.head_learning_rate), lr=lr, weight_decay=cfg.weight_decay
        )
        steps = epochs * ((len(pairs) + cfg.batch_size - 1) // cfg.batch_size)
        sched = transformers.get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * steps), steps)
        rng = random.Random(cfg.seed)
        t0 = time.perf_counter()
        step = 0
        for epoch in range(epochs):
            order = list(range(len(pairs)))
            rng.shuffle(order)
            for start in range(0, len(order), cfg.batch_size):
                batch = [pairs[i] for i in order[start : start + cfg.batch_size]]
                enc = self._batch([p.text_a for p in batch], [p.text_b for p in batch])
                labels = torch.tensor([p.label for p in batch], device=self.device)
                loss = loss_fn(self.model(**enc).logits, labels)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad()
                step += 1
                if step % 50 == 0:
                    logger.info("%s epoch %d step %d/%d loss %.4f", stage, epoch + 1, step, steps, float(loss))
        self.model.eval()
        logger.info("%s: %d pairs x %d epochs in %.1fs", stage, len(pairs), epochs, time.perf_counter() - t0)

    def fit(
        self,
        pretrain_pairs: Sequence[LabelledPair],
        finetune_pairs: Sequence[LabelledPair],
        config: TrainConfig | None = None,
    ) -> DependencyDiscriminator:
        """Two-stage training: balanced pretraining (Eq. 1), then imbalanced fine-tuning (Eq. 2)."""
        torch = require("torch")
        cfg = config or TrainConfig()
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(cfg.seed)
        self.max_length = cfg.max_length
        ce = torch.nn.functional.cross_entropy
        self._train_stage(
            pretrain_pairs, epochs=cfg.pretrain_epochs, lr=cfg.learning_rate, cfg=cfg, loss_fn=ce, stage="pretrain"
        )
        self._train_stage(
            finetune_pairs,
            epochs=cfg.finetune_epochs,
            lr=cfg.finetune_learning_rate,
            cfg=cfg,
            loss_fn=class_averaged_loss,
            stage="finetune",
        )
        self.trained = True
        return self

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """``save_pretrained`` folder (model + tokenizer) plus ``discriminator.json``; no pickle."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        meta = {"labels": list(LABELS), "max_length": self.max_length, "pair_format": "[doc a] [SEP] [doc b]"}
        write_atomic(path / "discriminator.json", json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> DependencyDiscriminator:
        path = Path(path)
        if not (path / "discriminator.json").exists():
            raise ConfigError(
                f"{path} is not a trained dependency discriminator (no discriminator.json); train one with "
                "`toolrerank train discriminator`"
            )
        return cls(path, **kwargs)


def discriminator_edges(
    model: DependencyDiscriminator,
    catalog: Catalog,
    pairs: Iterable[tuple[str, str]],
    *,
    threshold: float = 0.0,
) -> list[Edge]:
    """Classify unordered candidate pairs; an edge where a dependency class is the most probable one and its
    probability is at least ``threshold`` (0: the argmax alone decides, as in the P/R/F1 evaluation)."""
    pairs = list(pairs)
    if not pairs:
        return []
    texts: dict[str, str] = {}

    def text(tid: str) -> str:
        if tid not in texts:
            texts[tid] = pair_text(catalog[tid])
        return texts[tid]

    probs = model.predict_proba([(text(a), text(b)) for a, b in pairs])
    out = []
    for (a, b), p in zip(pairs, probs):
        k = int(np.argmax(p))
        if k == NO_DEPENDENCY or p[k] < threshold:
            continue
        if k == A_DEPENDS_ON_B:
            out.append(Edge(b, a, origin="discriminator", weight=float(p[k])))
        else:
            out.append(Edge(a, b, origin="discriminator", weight=float(p[k])))
    return out
