"""The [fast] extra's encoders (issue 28, item 2): ONNX Runtime (float32, int8) exported here from the bundled
MiniLM, and a static model2vec model distilled from it; both cached, both behind DenseConfig.backend."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the [fast] extra is not installed")
pytest.importorskip("sentence_transformers")

from toolrerank_plugins import Engine  # noqa: E402
from toolrerank_plugins.cpu_encoders import OnnxEmbedder, StaticEmbedder, export_onnx  # noqa: E402
from toolrerank_plugins.encoders import SentenceTransformerEmbedder  # noqa: E402
from toolrerank_plugins.errors import ConfigError  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402
from toolrerank_plugins.testing import tiny_catalog  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEXTS = ["find a hotel in Rome", "what's the weather tomorrow in Oslo?", "send an e-mail to my landlord about the rent"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLRERANK_CACHE", str(tmp_path_factory.getbasetemp() / "toolrerank-cache"))


def test_onnx_float32_gives_the_torch_vectors_and_int8_close_ones() -> None:
    torch_vectors = SentenceTransformerEmbedder("default").encode(TEXTS)
    fp32 = OnnxEmbedder("default").encode(TEXTS)
    int8 = OnnxEmbedder("default", quantize=True).encode(TEXTS)
    assert fp32.shape == int8.shape == torch_vectors.shape
    np.testing.assert_allclose(fp32, torch_vectors, atol=2e-4)
    assert np.linalg.norm(int8, axis=1) == pytest.approx(1.0, abs=1e-4)
    assert (int8 * torch_vectors).sum(axis=1).min() > 0.9  # close; quality is judged by retrieval (benchmarks)
    # long calls are batched in length order and put back in the caller's order
    many = [f"{t} number {i}" for i, t in enumerate(TEXTS * 12)]
    batched = OnnxEmbedder("default").encode(many, batch_size=4)
    np.testing.assert_allclose(batched[5], OnnxEmbedder("default").encode([many[5]])[0], atol=1e-5)


def test_the_export_is_cached_and_reused(tmp_path: Path) -> None:
    folder = export_onnx("default", quantize=True, out=tmp_path / "onnx")
    assert (folder / "model.onnx").is_file() and (folder / "model.int8.onnx").is_file()
    stamp = (folder / "model.int8.onnx").stat().st_mtime_ns
    assert export_onnx("default", quantize=True, out=tmp_path / "onnx") == folder
    assert (folder / "model.int8.onnx").stat().st_mtime_ns == stamp


def test_without_torchs_old_exporter_the_export_falls_back_and_gives_the_same_vectors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    without_torchscript_onnx_exporter: list[bool],
) -> None:
    pytest.importorskip("onnxscript")
    monkeypatch.setenv("TOOLRERANK_CACHE", str(tmp_path / "cache"))  # a fresh cache: the export runs here
    calls = without_torchscript_onnx_exporter
    with caplog.at_level("WARNING", logger="toolrerank_plugins.cpu_encoders"):
        fp32 = OnnxEmbedder("default").encode(TEXTS)
    assert calls == [False, True]
    assert "exporting with torch.export" in caplog.text
    int8 = OnnxEmbedder("default", quantize=True).encode(TEXTS)
    assert calls == [False, True]  # int8 quantises the float32 export already there
    reference = SentenceTransformerEmbedder("default").encode(TEXTS)
    np.testing.assert_allclose(fp32, reference, atol=2e-4)
    assert (int8 * reference).sum(axis=1).min() > 0.9
    one = OnnxEmbedder("default").encode(TEXTS[2:])  # one text, no padding: the axes stayed dynamic
    np.testing.assert_allclose(one, reference[2:], atol=2e-4)


def test_the_torchscript_exporter_asked_for_by_name_does_not_fall_back(
    tmp_path: Path, without_torchscript_onnx_exporter: list[bool]
) -> None:
    calls = without_torchscript_onnx_exporter
    with pytest.raises(RuntimeError, match="has been removed"):
        export_onnx("default", out=tmp_path / "onnx", exporter="torchscript")
    assert calls == [False]
    assert not (tmp_path / "onnx").exists()  # nothing half-written is published
    with pytest.raises(ConfigError, match="unknown ONNX exporter 'legacy'"):
        export_onnx("default", out=tmp_path / "onnx", exporter="legacy")  # type: ignore[arg-type]


def test_an_export_leaves_the_exporters_warnings_to_the_debug_log(tmp_path: Path) -> None:
    """The TorchScript exporter's deprecation and the tracer's notes would reach every user building an ONNX
    engine; the exported graph is checked against the model instead (below)."""
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = export_onnx("default", out=tmp_path / "onnx")
    assert (folder / "model.onnx").is_file()
    noisy = [w for w in caught if issubclass(w.category, (DeprecationWarning, torch.jit.TracerWarning))]
    assert noisy == []


def _wrong_when(torch: Any, monkeypatch: pytest.MonkeyPatch, *, dynamo: bool) -> None:
    """torch.onnx.export writes a graph whose outputs are half the model's when its ``dynamo`` flag is ``dynamo``
    (False: the TorchScript exporter; True: torch.export's)."""
    real = torch.onnx.export
    wrong_for = dynamo

    def export(module: Any, args: Any, *rest: Any, dynamo: bool = True, **kwargs: Any) -> Any:
        if dynamo is wrong_for:

            class Halved(torch.nn.Module):  # type: ignore[misc,name-defined]
                def __init__(self) -> None:
                    super().__init__()
                    self.inner = module

                def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
                    return self.inner(input_ids, attention_mask, token_type_ids) * 0.5

            module = Halved().eval()
        return real(module, args, *rest, dynamo=dynamo, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", export)


def test_a_wrong_torchscript_graph_falls_back_or_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    _wrong_when(torch, monkeypatch, dynamo=False)
    with pytest.raises(ConfigError, match="TorchScript ONNX export of this model is wrong: outputs up to"):
        export_onnx("default", out=tmp_path / "forced", exporter="torchscript")
    assert not (tmp_path / "forced").exists()  # nothing is published
    monkeypatch.setenv("TOOLRERANK_CACHE", str(tmp_path / "cache"))  # a fresh cache: the export runs here
    with caplog.at_level("WARNING", logger="toolrerank_plugins.cpu_encoders"):
        fp32 = OnnxEmbedder("default").encode(TEXTS)
    assert "TorchScript ONNX export is wrong" in caplog.text and "exporting with torch.export" in caplog.text
    np.testing.assert_allclose(fp32, SentenceTransformerEmbedder("default").encode(TEXTS), atol=2e-4)


def test_a_wrong_torch_export_graph_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    _wrong_when(torch, monkeypatch, dynamo=True)
    with pytest.raises(ConfigError, match="ONNX export of this model is wrong: outputs up to"):
        export_onnx("default", out=tmp_path / "onnx", exporter="dynamo")
    assert not (tmp_path / "onnx").exists()


def test_backends_plug_into_the_engine() -> None:
    for backend in ("onnx-int8", "static"):
        cfg = pipeline_config("dense", dense={"backend": backend})
        engine = Engine.build(tiny_catalog(), cfg)
        assert engine.search("send an email message", top_k=3)[0].tool.name == "send_email", backend
        assert engine.embedder.model_id.startswith(("onnx-int8:", "model2vec:"))


def test_the_static_model_is_distilled_once_and_is_fast_to_use() -> None:
    emb = StaticEmbedder("default")
    vectors = emb.encode(TEXTS * 100)
    assert vectors.shape == (300, emb.dimension) and emb.dimension == 256
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-4)
    sims = vectors[:3] @ vectors[:3].T
    assert sims[0, 1] < 0.99  # different texts, different vectors
