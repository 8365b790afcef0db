from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.builder import DiscriminatorJudge
from toolrerank_plugins.graph.discriminator import (
    A_DEPENDS_ON_B,
    B_DEPENDS_ON_A,
    NO_DEPENDENCY,
    DependencyDiscriminator,
    TrainConfig,
    class_averaged_loss,
    make_pairs,
    per_class_report,
)
from toolrerank_plugins.records import Edge


def test_make_pairs_labels_and_balance(bank: Catalog) -> None:
    edges = [Edge("GetUserToken", "DeleteAccount"), Edge("GetUserToken", "OpenAccount")]
    pairs = make_pairs(bank, edges, negatives_per_edge=1.0, seed=1)
    by = {(p.a, p.b): p.label for p in pairs}
    assert by[("DeleteAccount", "GetUserToken")] == A_DEPENDS_ON_B
    assert by[("GetUserToken", "DeleteAccount")] == B_DEPENDS_ON_A
    counts = [sum(p.label == k for p in pairs) for k in range(3)]
    assert counts == [2, 2, 2]  # balanced
    linked = {("GetUserToken", "DeleteAccount"), ("GetUserToken", "OpenAccount")}
    for p in pairs:
        if p.label == NO_DEPENDENCY:
            assert (p.a, p.b) not in linked and (p.b, p.a) not in linked
    imbalanced = make_pairs(bank, edges, negatives_per_edge=3.0, seed=1)
    assert sum(p.label == NO_DEPENDENCY for p in imbalanced) == 6


def test_make_pairs_ignores_self_loops_and_unknown(bank: Catalog) -> None:
    pairs = make_pairs(bank, [Edge("Weather", "Weather"), Edge("Ghost", "Weather")], negatives_per_edge=1.0)
    assert pairs == []


def test_class_averaged_loss_is_eq2() -> None:
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[2.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.5, 0.3]])
    labels = torch.tensor([0, 1, 1, 2])
    ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    expected = ce[0] + (ce[1] + ce[2]) / 2 + ce[3]
    assert torch.allclose(class_averaged_loss(logits, labels), expected)
    # The rare class weighs as much as the frequent one, unlike the plain mean.
    assert not torch.allclose(class_averaged_loss(logits, labels), ce.mean())


def test_per_class_report() -> None:
    rep = per_class_report([0, 1, 1, 2, 1], [0, 1, 0, 1, 1])
    assert rep["a_depends_on_b"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}
    assert rep["b_depends_on_a"]["recall"] == 0.0
    assert rep["edge_any_direction"]["precision"] == 0.5


class _FixedModel:
    def __init__(self, probs: list[list[float]]) -> None:
        self.probs = np.asarray(probs, dtype=np.float32)

    def predict_proba(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        return self.probs[: len(pairs)]


def test_discriminator_edges_direction_and_threshold(bank: Catalog) -> None:
    judge = DiscriminatorJudge(_FixedModel([[0.8, 0.1, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3]]), threshold=0.6)
    edges = judge.edges(
        bank, [("DeleteAccount", "GetUserToken"), ("GetUserToken", "OpenAccount"), ("Weather", "NoSchema")]
    )
    # (a=DeleteAccount, b=GetUserToken): a depends on b; (a=GetUserToken, b=OpenAccount): b depends on a.
    assert [(e.source, e.target) for e in edges] == [("GetUserToken", "DeleteAccount"), ("GetUserToken", "OpenAccount")]
    assert edges[0].weight == pytest.approx(0.8) and all(e.origin == "discriminator" for e in edges)


def test_load_rejects_untrained_folder(tmp_path: Path) -> None:
    from toolrerank_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="not a trained dependency discriminator"):
        DependencyDiscriminator.load(tmp_path)


@pytest.mark.slow
def test_tiny_training_save_load_round_trip(bank: Catalog, tmp_path: Path) -> None:
    edges = [Edge("GetUserToken", "DeleteAccount"), Edge("GetUserToken", "OpenAccount")]
    pairs = make_pairs(bank, edges, negatives_per_edge=1.0)
    model = DependencyDiscriminator("default", device="cpu", max_length=48)
    before = model.predict_proba([(p.text_a, p.text_b) for p in pairs])
    model.fit(pairs, pairs, TrainConfig(batch_size=6, max_length=48, torch_threads=1))
    after = model.predict_proba([(p.text_a, p.text_b) for p in pairs])
    assert not np.allclose(before, after)
    model.save(tmp_path / "d")
    back = DependencyDiscriminator.load(tmp_path / "d", device="cpu")
    np.testing.assert_allclose(back.predict_proba([(p.text_a, p.text_b) for p in pairs]), after, atol=1e-5)
    assert back.max_length == 48
