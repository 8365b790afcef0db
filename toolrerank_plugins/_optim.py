"""Optimiser parameter groups shared by the cross-encoder trainers (reranker, dependency discriminator)."""

from __future__ import annotations

from typing import Any

#: Parameter-name markers of a sequence-classification model's scoring head (fresh at the start of
#: fine-tuning) and of BERT's pooler that feeds it.
HEAD_MARKERS = ("classifier.", "pooler.")


def head_param_groups(model: Any, lr: float, head_lr: float | None) -> list[dict[str, Any]]:
    """Two AdamW groups: the encoder at ``lr``, the head (and pooler) at ``head_lr`` (``None``: ``lr``).

    A head initialised at random and trained at an encoder-sized learning rate for a few hundred steps
    barely leaves its initialisation; a larger ``head_lr`` lets it learn while the encoder moves gently.
    """
    head: list[Any] = []
    body: list[Any] = []
    for name, param in model.named_parameters():
        is_head = name.startswith(HEAD_MARKERS) or any(f".{m}" in name for m in HEAD_MARKERS)
        (head if is_head else body).append(param)
    return [{"params": body, "lr": lr}, {"params": head, "lr": lr if head_lr is None else head_lr}]
