"""A serving dense index holds its vectors once (issue 28, item 5): the faiss index is the copy; raw vectors are
kept apart only while a document transform (TGR propagation) makes the index hold other ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolrerank_plugins import Engine
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

pytest.importorskip("faiss")


@pytest.mark.parametrize("index", ["flat", "flat-fp16", "hnsw"])
def test_one_copy_of_the_vectors_through_changes_and_a_save(index: str, tmp_path: Path) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), pipeline_config("dense", dense={"index": index}), embedder=emb)
    dense = engine.first_stage
    assert dense._emb is None  # type: ignore[attr-defined]
    expected = emb.encode([engine.render(engine.catalog[i]) for i in engine.catalog.ids])
    if index == "flat-fp16":  # the index holds (and reads back) the 16-bit values; changes never round them again
        rounded = expected.astype(np.float16).astype(np.float32)
        assert not np.array_equal(rounded, expected)
        expected = rounded
    np.testing.assert_allclose(dense.embeddings, expected, atol=1e-6)  # type: ignore[attr-defined]
    if index != "hnsw":  # bytes a vector takes in the index: 4 a value, 2 as 16-bit floats
        assert dense._index.sa_code_size() == emb.dimension * (2 if index == "flat-fp16" else 4)  # type: ignore[attr-defined]
    before = [r.id for r in engine.search("send an email", 5)]
    engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")])
    engine.update([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a calzone")])
    engine.remove(["Food/Pizza/order"])
    assert engine.first_stage._emb is None and [r.id for r in engine.search("send an email", 5)] == before  # type: ignore[attr-defined]
    back = Engine.load(engine.save(tmp_path / "e"), embedder=emb)
    assert back.first_stage._emb is None  # type: ignore[attr-defined]
    np.testing.assert_allclose(back.first_stage.embeddings_for(["Mail/PostBox/send_email"]),
                               expected[[engine.catalog.ids.index("Mail/PostBox/send_email")]], atol=1e-6)


def test_raw_vectors_kept_while_propagation_transforms_the_index(tmp_path: Path) -> None:
    emb = FakeEmbedder()
    cfg = pipeline_config("dense", stages=[{"type": "tgr", "params": {"propagate": True, "alpha": 0.5}}])
    catalog = tiny_catalog()
    engine = Engine.build(catalog, cfg, embedder=emb)
    dense = engine.first_stage
    raw = emb.encode([engine.render(catalog[i]) for i in catalog.ids])
    assert dense._emb is not None  # type: ignore[attr-defined]
    np.testing.assert_allclose(dense.embeddings, raw, atol=1e-6)  # type: ignore[attr-defined]
    back = Engine.load(engine.save(tmp_path / "e"), embedder=emb)
    np.testing.assert_allclose(back.first_stage.embeddings, raw, atol=1e-6)  # type: ignore[attr-defined]
    q = "delete the user account"
    assert [r.id for r in back.search(q, 5)] == [r.id for r in engine.search(q, 5)]
