"""The ``usage_memory`` stage's config (read by the memory, its calibration and the stage)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel


class UsageMemoryConfig(ConfigModel):
    """Parameters of the ``usage_memory`` stage (fusion knobs chosen on train splits: ``docs/benchmarks/usage.md``).

    Attributes:
        neighbours: how many similar past requests vote.
        min_similarity: a past request below this similarity does not vote (an irrelevant memory changes
            nothing); similarity = ``dense_weight`` * dense cosine + (1 - ``dense_weight``) * TF-IDF cosine.
        dense_weight: weight of the dense similarity (the rest is lexical).
        weight: ``fusion="weighted"``: weight of the memory's votes against the ranking's reciprocal ranks.
        rrf_k: ``fusion="weighted"``: the ranking contributes ``1 / (rrf_k + rank)``.
        sharpness: a vote is ``((sim - min_similarity) / (1 - min_similarity)) ** sharpness``.
        share_exponent: a past request's vote is divided by ``n_tools ** share_exponent``.
        min_support: co-usage edges need this many requests using both tools.
        trace_neighbours: similar past requests listed in the trace.
        split_requests: a message holding several requests (``multi_intent``'s
            :func:`~toolrerank_plugins.rerank.intents.split_requests`) is also looked up request by request,
            a tool keeping its best vote (a past request rarely asked for two things at once).
        part_support: a request of a multi-request message votes only for tools that served at least this
            many of its similar past requests (one wrong record cannot outvote the whole message).
        fusion: ``"calibrated"`` (default): each candidate's score is ``1 - (1 - p_rank) * (1 - p_vote)``,
            the probabilities that its rank in the ranking and its vote name a tool that serves the request,
            both measured on the log itself when it is learned (:class:`Calibration`), so the memory reorders
            only as far as it was more often right than the ranking; ``"weighted"``:
            ``1 / (rrf_k + rank) + weight * vote``.
        calibration_records: log records ranked by the catalog and voted on leave-one-out to fit the
            :class:`Calibration` (each costs one first-stage search when the log is learned).
        min_votes: fewer leave-one-out votes than this (or none right, or none wrong): too little evidence
            to fit the calibration's model; a vote then counts as far as those votes were right, and not at
            all without any (:meth:`Calibration.probability`).
        prior: pseudo-counts smoothing the ranks' precision towards ``1 / (rank + 1)``.
        ridge: L2 penalty on the memory's weights in the calibration's logistic model (the less evidence, the
            closer to "the memory changes nothing").
    """

    model_config = ConfigDict(extra="forbid")

    neighbours: int = Field(10, ge=1)
    min_similarity: float = Field(0.5, ge=0.0, lt=1.0)
    dense_weight: float = Field(0.9, ge=0.0, le=1.0)
    weight: float = Field(2.0, ge=0.0)
    rrf_k: int = Field(5, ge=1)
    sharpness: float = Field(1.0, gt=0.0)
    share_exponent: float = Field(0.5, ge=0.0)
    min_support: int = Field(2, ge=1)
    trace_neighbours: int = Field(3, ge=0)
    split_requests: bool = True
    part_support: int = Field(2, ge=1)
    fusion: Literal["calibrated", "weighted"] = "calibrated"
    calibration_records: int = Field(300, ge=0)
    min_votes: int = Field(20, ge=1)
    prior: float = Field(2.0, gt=0.0)
    ridge: float = Field(1.0, ge=0.0)
