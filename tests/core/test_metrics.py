from __future__ import annotations

import math

import pytest

from toolrerank_plugins.metrics import (
    average_precision,
    mmrr,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    sufficiency_at_k,
)

RANK = ["a", "x", "b", "y", "c"]
REL = {"a", "b", "c", "d"}


def test_recall_precision_by_hand() -> None:
    assert recall_at_k(RANK, REL, 1) == 0.25
    assert recall_at_k(RANK, REL, 3) == 0.5
    assert recall_at_k(RANK, REL, 5) == 0.75
    assert precision_at_k(RANK, REL, 2) == 0.5
    assert precision_at_k(RANK, REL, 5) == 0.6
    # k beyond the list: precision is over k, so missing positions count as misses
    assert precision_at_k(RANK, REL, 10) == 0.3


def test_ndcg_by_hand() -> None:
    dcg = 1 / math.log2(2) + 1 / math.log2(4)
    idcg = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(RANK, REL, 3) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "b"], {"a", "b"}, 5) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a"], {"a"}, 2) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["x", "y"], {"a"}, 2) == 0.0


def test_sufficiency_needs_all_relevant() -> None:
    assert sufficiency_at_k(RANK, REL, 5) == 0.0
    assert sufficiency_at_k(RANK, {"a", "b"}, 3) == 1.0
    assert sufficiency_at_k(RANK, {"a", "b"}, 2) == 0.0


def test_mmrr_by_hand() -> None:
    # perfect ranks mean (1+2)/2 = 1.5; actual ranks 1 and 3 -> mean 2
    assert mmrr(["a", "x", "b"], {"a", "b"}, 3) == pytest.approx(0.75)
    # perfect retrieval = 1
    assert mmrr(["b", "a", "x"], {"a", "b"}, 3) == pytest.approx(1.0)
    # missing item counted at rank k+1: ranks 1 and 4 -> 1.5 / 2.5
    assert mmrr(["a", "x", "y"], {"a", "b"}, 3) == pytest.approx(0.6)


def test_average_precision_by_hand() -> None:
    # hits at 1 and 3: (1/1 + 2/3) / min(4, 5)
    assert average_precision(["a", "x", "b"], REL, 5) == pytest.approx((1 + 2 / 3) / 4)
    assert average_precision(["a", "b"], {"a", "b"}, 10) == pytest.approx(1.0)
    assert average_precision(["x"], {"a"}, 1) == 0.0


def test_duplicates_in_ranking_count_once() -> None:
    assert recall_at_k(["a", "a", "a"], {"a", "b"}, 3) == 0.5
    # the repeat is dropped before the cut-off, so b moves up to rank 2
    assert precision_at_k(["a", "a", "b"], {"a", "b"}, 2) == 1.0


def test_empty_ranking_and_whole_list_cutoff() -> None:
    assert recall_at_k([], {"a"}, 5) == 0.0
    assert ndcg_at_k([], {"a"}, 5) == 0.0
    assert mmrr([], {"a"}, 5) == pytest.approx(1 / 6)
    assert recall_at_k(["x", "a"], {"a"}) == 1.0


@pytest.mark.parametrize("fn", [recall_at_k, ndcg_at_k, sufficiency_at_k, precision_at_k, mmrr, average_precision])
def test_undefined_without_relevant_and_bad_k(fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="no relevant"):
        fn(["a"], set(), 5)
    with pytest.raises(ValueError, match="k must be"):
        fn(["a"], {"a"}, 0)
