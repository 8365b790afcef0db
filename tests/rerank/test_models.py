from __future__ import annotations

import json

import numpy as np
import pytest

from toolrerank_plugins import default_catalog_path
from toolrerank_plugins.cli import main
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.rerank.classifier import QueryTypeClassifier
from toolrerank_plugins.rerank.cross_encoder import (
    CachedReranker,
    SentenceTransformerReranker,
    read_reranker_meta,
    write_reranker_meta,
)
from toolrerank_plugins.testing import FakeCrossEncoder, FakeEmbedder


def test_fake_cross_encoder_is_deterministic_and_bounded():
    ce = FakeCrossEncoder()
    a = ce.score("weather in paris", ["paris weather", "mail", ""])
    assert a == ce.score("weather in paris", ["paris weather", "mail", ""])
    assert all(0.0 <= s <= 1.0 for s in a) and a[0] > a[1] == 0.0
    assert ce.score("", ["x"]) == [0.0] and ce.score("q", []) == []


def test_cached_reranker_scores_each_pair_once():
    inner = FakeCrossEncoder(seen_tools=["T"])
    cached = CachedReranker(inner)
    first = cached.score("q w", ["a w", "b", "a w"])
    assert cached.score("q w", ["b", "a w"]) == [first[1], first[0]]
    assert inner.pairs_scored == 2 and cached.seen_tools == frozenset({"T"})


def _model_dir(tmp_path, **meta):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"x")
    write_reranker_meta(d, seen_tools=["A", "B"], **meta)
    return d


def test_reranker_meta_round_trip(tmp_path):
    d = _model_dir(tmp_path, max_length=96)
    meta = read_reranker_meta(d)
    assert meta["seen_tools"] == ["A", "B"] and meta["max_length"] == 96


@pytest.mark.parametrize(
    "breakage, match",
    [
        ("missing_dir", "does not exist"),
        ("no_meta", "not a toolrerank reranker"),
        ("corrupt_meta", "corrupt reranker metadata \\(not valid JSON"),
        ("newer", "newer than"),
        ("no_weights", "weights"),
        ("no_config", "config.json"),
        ("no_version", "format_version"),
    ],
)
def test_broken_reranker_folders_raise_clear_errors(tmp_path, breakage, match):
    d = _model_dir(tmp_path)
    meta = d / "toolrerank_reranker.json"
    if breakage == "missing_dir":
        d = tmp_path / "absent"
    elif breakage == "no_meta":
        meta.unlink()
    elif breakage == "corrupt_meta":
        meta.write_text("{not json")
    elif breakage == "newer":
        meta.write_text(json.dumps({"format_version": 999, "library_version": "9.9"}))
    elif breakage == "no_weights":
        (d / "model.safetensors").unlink()
    elif breakage == "no_config":
        (d / "config.json").unlink()
    elif breakage == "no_version":
        meta.write_text(json.dumps({"seen_tools": []}))
    with pytest.raises(PersistenceError, match=match):
        SentenceTransformerReranker(d)


def test_raw_folder_without_meta_needs_check_meta_false(tmp_path):
    with pytest.raises(ConfigError, match="local folder"):
        SentenceTransformerReranker(tmp_path / "absent", check_meta=False)


def _clf(dim: int = 64) -> QueryTypeClassifier:
    texts = [
        "weather today",
        "weather forecast",
        "current weather",
        "send email and check weather",
        "book a flight and a hotel",
        "email then calendar then map",
    ]
    return QueryTypeClassifier(FakeEmbedder(dim)).fit(texts, ["single"] * 3 + ["multi"] * 3, epochs=800)


def test_classifier_learns_training_set_and_round_trips(tmp_path):
    clf = _clf()
    assert clf.info["train_accuracy"] == 1.0
    clf.save(tmp_path)
    loaded = QueryTypeClassifier.load(tmp_path, FakeEmbedder(64))
    qs = ["weather today", "book a flight and a hotel"]
    assert loaded.predict(qs) == clf.predict(qs) == ["single", "multi"]
    assert np.allclose(loaded.predict_proba(qs), clf.predict_proba(qs), atol=1e-6)
    assert loaded.predict([]) == []


def test_classifier_bad_inputs(tmp_path):
    emb = FakeEmbedder(16)
    with pytest.raises(ValueError, match="only one query type"):
        QueryTypeClassifier(emb).fit(["a", "b"], ["single", "single"])
    with pytest.raises(ValueError, match="labels must be"):
        QueryTypeClassifier(emb).fit(["a"], ["many"])
    with pytest.raises(ConfigError, match="not trained"):
        QueryTypeClassifier(emb).predict(["a"])
    with pytest.raises(PersistenceError, match="no classifier.json"):
        QueryTypeClassifier.load(tmp_path, emb)
    _clf(64).save(tmp_path)
    with pytest.raises(PersistenceError, match="64-d"):
        QueryTypeClassifier.load(tmp_path, FakeEmbedder(32))
    (tmp_path / "classifier.json").write_text("{}")
    with pytest.raises(PersistenceError, match="corrupt"):
        QueryTypeClassifier.load(tmp_path, emb)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", json.dumps({"format_version": 999})])
def test_train_reranker_from_a_broken_base_model_is_a_clear_error(tmp_path, capsys, content):
    """`toolrerank train reranker --base-model` continuing a trained reranker reads its metadata through
    read_reranker_meta, before any training pair is collected: a broken file is the CLI's error naming it, not a
    JSONDecodeError or AttributeError."""
    d = _model_dir(tmp_path)
    (d / "toolrerank_reranker.json").write_text(content)
    argv = ["train", "reranker", "--pseudo-from", str(default_catalog_path()), "--base-model", str(d)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolrerank: error: ") and str(d) in err  # names the folder or its file
    assert not (tmp_path / "out").exists()
