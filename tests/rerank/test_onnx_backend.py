"""The cross-encoder's ONNX Runtime backends (ToolRerankConfig.backend = onnx | onnx-int8, the [fast] extra): a
reranker folder exported here (sigmoid in the graph), cached by a hash of its weights, the same scores as torch
(float32) or close ones (int8), and a stage that saves and loads with its backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the [fast] extra is not installed")
pytest.importorskip("sentence_transformers")

from toolrerank_plugins.cpu_encoders import model_fingerprint  # noqa: E402
from toolrerank_plugins.engine import Engine, EngineConfig  # noqa: E402
from toolrerank_plugins.errors import ConfigError  # noqa: E402
from toolrerank_plugins.rerank.cross_encoder import (  # noqa: E402
    OnnxReranker,
    SentenceTransformerReranker,
    load_reranker,
)
from toolrerank_plugins.rerank.training import Pair, train_cross_encoder  # noqa: E402
from toolrerank_plugins.stages import StageSpec  # noqa: E402
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

QUERY = "weather forecast for tomorrow in Oslo"
TEXTS = [
    "forecast | Weather forecast for the coming days | city, days",
    "send_email | Send an email message",
    "geocode | Find coordinates of a street address " + "with many optional parameters " * 20,  # truncated
    "x",
    "current | Current weather conditions in a city",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("toolrerank-cache")


@pytest.fixture(autouse=True)
def _cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLRERANK_CACHE", str(cache))


def _train(out: Path, head_lr: float) -> Path:
    pairs = [
        Pair("weather forecast", "forecast | Weather forecast for the coming days", 1.0, "t"),
        Pair("weather forecast", "send_email | Send an email message", 0.0, "t"),
    ] * 4
    train_cross_encoder(
        pairs,
        out,
        seen_tools=["Weather/SkyCast"],
        num_layers=1,
        max_length=32,
        batch_size=4,
        device="cpu",
        threads=1,
        lr=0.0,  # the encoder stays the base's: two models differ in their scoring head only
        head_lr=head_lr,
        warmup_ratio=0.0,
    )
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("ce") / "ce", 1e-2)


def test_onnx_float32_gives_the_torch_scores_and_int8_close_ones(model: Path) -> None:
    torch_scores = np.array(SentenceTransformerReranker(model, device="cpu").score(QUERY, TEXTS))
    fp32 = OnnxReranker(model)
    int8 = OnnxReranker(model, quantize=True)
    got = np.array(fp32.score(QUERY, TEXTS))
    np.testing.assert_allclose(got, torch_scores, atol=1e-4)  # same truncation (max_length 32 from the meta)
    assert fp32.max_length == 32 and fp32.seen_tools == frozenset({"Weather/SkyCast"})
    close = np.array(int8.score(QUERY, TEXTS))
    assert ((close >= 0) & (close <= 1)).all() and np.abs(close - torch_scores).max() < 0.05
    # several batches (pairs sorted by length) come back in the caller's order
    np.testing.assert_allclose(fp32.score(QUERY, TEXTS, batch_size=2), got, atol=1e-5)
    assert fp32.score(QUERY, []) == []


def test_without_torchs_old_exporter_the_export_falls_back_and_scores_alike(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, without_torchscript_onnx_exporter: list[bool]
) -> None:
    pytest.importorskip("onnxscript")
    monkeypatch.setenv("TOOLRERANK_CACHE", str(tmp_path / "cache"))  # a fresh cache: the export runs here
    got = np.array(OnnxReranker(model).score(QUERY, TEXTS))
    assert without_torchscript_onnx_exporter == [False, True]
    torch_scores = np.array(SentenceTransformerReranker(model, device="cpu").score(QUERY, TEXTS))
    np.testing.assert_allclose(got, torch_scores, atol=1e-4)
    assert np.abs(np.array(OnnxReranker(model, quantize=True).score(QUERY, TEXTS)) - torch_scores).max() < 0.05


def test_thread_counts_are_chosen_per_call_unless_set(model: Path) -> None:
    fixed = OnnxReranker(model, threads=1)
    assert {fixed.threads_for() for _ in range(5)} == {1}
    auto = OnnxReranker(model)
    scores = [auto.score(QUERY, TEXTS) for _ in range(4)]  # the first calls try every option
    assert all(np.allclose(s, scores[0], atol=1e-5) for s in scores)
    assert set(auto._sessions) <= {1, auto._chooser.options[-1]} and len(auto._sessions) == len(auto._chooser.options)
    st = SentenceTransformerReranker(model, device="cpu", threads=1)
    assert st.threads_for() == 1


def test_the_export_is_cached_by_the_weights(model: Path, cache: Path, tmp_path: Path) -> None:
    first = OnnxReranker(model, quantize=True)
    first.score(QUERY, TEXTS[:1])
    folder = first._ready()
    assert folder.parent == cache / "onnx-score"
    assert (folder / "model.onnx").is_file() and (folder / "model.int8.onnx").is_file()
    stamp = (folder / "model.int8.onnx").stat().st_mtime_ns
    again = OnnxReranker(model, quantize=True)
    assert again._ready() == folder and (folder / "model.int8.onnx").stat().st_mtime_ns == stamp
    # a sibling trained from the same base with only its head moved shares the first MiB of its weights: the
    # whole-file hash still gives it its own export
    frozen = _train(tmp_path / "frozen", 0.0)
    assert model_fingerprint(frozen) == model_fingerprint(model)  # the cheap hash cannot tell them apart
    other = OnnxReranker(frozen)
    assert other._ready() != folder
    assert not np.allclose(other.score(QUERY, TEXTS), first.score(QUERY, TEXTS), atol=1e-3)


def test_unknown_backend_and_a_gpu_for_onnx_are_clear_errors(model: Path) -> None:
    with pytest.raises(ConfigError, match="known: torch, onnx, onnx-int8"):
        load_reranker(model, backend="openvino")
    with pytest.raises(ConfigError, match="CPU only"):
        load_reranker(model, backend="onnx", device="cuda")
    assert isinstance(load_reranker(model, backend="onnx-int8", device="auto"), OnnxReranker)


def test_the_stage_runs_saves_and_loads_on_the_onnx_backend(model: Path, tmp_path: Path) -> None:
    def config(backend: str) -> EngineConfig:
        params = {"model_path": str(model), "classification": "single", "device": "cpu", "backend": backend}
        return EngineConfig(retriever="bm25", stages=[StageSpec(type="toolrerank", params=params)])

    query = "weather forecast tomorrow"
    on_torch = Engine.build(tiny_catalog(), config("torch"), embedder=FakeEmbedder(32)).search(query, 5)
    engine = Engine.build(tiny_catalog(), config("onnx"), embedder=FakeEmbedder(32))
    assert isinstance(engine.stages[0].reranker, OnnxReranker)
    res = engine.search_detailed(query, 5)
    assert res.trace["toolrerank"]["scorer"] == "cross-encoder"
    assert [r.id for r in res.results] == [r.id for r in on_torch]
    assert [r.score for r in res.results] == pytest.approx([r.score for r in on_torch], abs=1e-4)
    engine.save(tmp_path / "eng")
    loaded = Engine.load(tmp_path / "eng", embedder=FakeEmbedder(32))
    reranker = loaded.stages[0].reranker
    assert isinstance(reranker, OnnxReranker) and "Weather/SkyCast" in reranker.seen_tools
    assert [r.id for r in loaded.search(query, 5)] == [r.id for r in res.results]
