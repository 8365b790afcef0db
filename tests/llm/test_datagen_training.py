from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.llm.datagen import (
    generate_feedback_traces,
    generate_qta_dpo_pairs,
    qta_reward,
    rejection_sampling,
    write_jsonl,
)
from toolrerank_plugins.llm.feedback import FEEDBACK_MARKER, FeedbackConfig, FeedbackStage
from toolrerank_plugins.llm.feedback_training import build_examples, train_feedback_retriever
from toolrerank_plugins.llm.qta import QTAConfig
from toolrerank_plugins.llm.query_generation import QueryGenerationConfig
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.testing import ScriptedLLM, tiny_catalog, tiny_queries


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", depth=10))


def test_qta_reward_shape() -> None:
    assert qta_reward([1], k=5) > qta_reward([2], k=5) > qta_reward([5], k=5) > 0
    assert 0 > qta_reward([6], k=5) > qta_reward([20], k=5) > qta_reward([None], k=5, depth=100)
    assert qta_reward([1], k=5) > 1.0  # above plain DCG's 1/log2(2) = 1
    assert qta_reward([1, 2]) == pytest.approx(qta_reward([1]) + qta_reward([2]))  # summed over gold tools


def test_qta_dpo_pairs_prefer_the_better_rewrite(engine: Engine, tmp_path: Path) -> None:
    q = LabelledQuery("q", "I need to know where my office is", ("Maps/GeoFind/geocode",))
    llm = ScriptedLLM(
        ["geocode the street address into latitude and longitude", "send an email", "I'm sorry, I can't"], cycle=True
    )
    rows = generate_qta_dpo_pairs(engine, [q], llm, config=QTAConfig(n_tools=4), n_samples=3, pairs_per_query=2)
    assert len(rows) == 2
    for r in rows:
        assert r["chosen"].startswith("geocode") and r["chosen_reward"] > r["rejected_reward"]
        assert "<tool_documents>" in r["prompt"] and r["prompt"].rstrip().endswith("Rewritten query:")
    assert rows[0]["prompt"] != rows[1]["prompt"]  # a different tool sample per pair
    assert all(c.temperature == 1.0 for c in llm.calls)
    n = write_jsonl(tmp_path / "dpo.jsonl", rows)
    back = [json.loads(x) for x in (tmp_path / "dpo.jsonl").read_text().splitlines()]
    assert n == 2 and set(back[0]) >= {"prompt", "chosen", "rejected"}


def test_rejection_sampling_keeps_best_draft_above_threshold(engine: Engine) -> None:
    qs = tiny_queries()[:2]  # weather forecast; send email
    llm = ScriptedLLM(
        rules=[
            (r"weather tomorrow", lambda t: "- list the inbox"),  # only bad drafts for q1
        ],
        responses=["- send an email message to a recipient", "- delete an email", "garbage ####"],
        cycle=True,
    )
    # one call at a time: drafts then meet the scripted answers in order (ties keep the first draft)
    serial = QueryGenerationConfig(runtime={"max_concurrency": 1})
    rows = rejection_sampling(engine, qs, llm, config=serial, n_drafts=3, min_reward=0.5, k=5)
    assert [r["query_id"] for r in rows] == ["q2"]
    assert rows[0]["completion"] == "send an email message to a recipient" and rows[0]["reward"] == pytest.approx(1.0)
    everything = rejection_sampling(engine, qs, llm, n_drafts=3, min_reward=0.0, k=5, top_n=2)
    assert len(everything) == 3  # q1's three identical drafts count once; q2's garbage draft is dropped
    top = rejection_sampling(engine, qs, llm, n_drafts=3, min_reward=0.0, k=5, top_n=2, percentile=34)
    cut = float(np.percentile([r["reward"] for r in everything], 66))
    assert 1 <= len(top) < 3 and all(r["reward"] >= cut for r in top)


def _trace_llm() -> ScriptedLLM:
    return ScriptedLLM(
        rules=[
            (r"Step 1 - Comprehension", "The user wants a tool; here are the tools' functions."),
            (r"Step 2 - Assessment", "Some goals are unsolved; ranking could be better."),
            (r"change my email.*Step 3 - Refinement", "log in and then update the email address of the account"),
            (r"coordinates.*Step 3 - Refinement", "geocode the street address and get the current weather there"),
            (r"Step 3 - Refinement", "N/A"),
        ]
    )


def test_feedback_traces(engine: Engine) -> None:
    rows = generate_feedback_traces(engine, tiny_queries(), _trace_llm(), config=FeedbackConfig(rounds=2))
    assert len(rows) == 4
    by = {r["query_id"]: r for r in rows}
    assert len(by["q3"]["rounds"]) == 2 and by["q3"]["rounds"][1]["query"].startswith("log in")
    assert by["q1"]["stop_reason"] == "llm_na" and len(by["q1"]["rounds"]) == 1
    ex = build_examples(rows, tiny_catalog(), hard_negatives=1)
    rounds = {e.round for e in ex}
    assert rounds == {0, 1}
    e = next(x for x in ex if x.round == 1)
    assert e.anchor.startswith("Iteration 1: ") and e.positive and len(e.negatives) == 1
    assert e.negatives[0] not in e.relevant_texts


@pytest.mark.model
@pytest.mark.slow
def test_feedback_training_trains_and_the_stage_uses_the_prefix(engine: Engine, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    rows = generate_feedback_traces(engine, tiny_queries(), _trace_llm(), config=FeedbackConfig(rounds=2))
    out = tmp_path / "model"
    report = train_feedback_retriever(
        rows, tiny_catalog(), out, batch_size=4, epochs=2, learning_rate=1e-4, max_length=64, device="cpu"
    )
    assert report.steps >= 2 and (out / FEEDBACK_MARKER).is_file() and (out / "config.json").is_file()
    marker = json.loads((out / FEEDBACK_MARKER).read_text())
    assert marker["examples_per_round"] == {"0": 6, "1": 4}  # q1..q4 relevant ids in round 0; q3, q4 refined
    from safetensors.torch import load_file

    from toolrerank_plugins.encoders import default_model_path

    base = load_file(str(default_model_path() / "model.safetensors"))
    tuned = load_file(str(next(out.rglob("model.safetensors"))))
    key = next(k for k in tuned if k.endswith("attention.self.query.weight"))
    base_key = next(k for k in base if k.endswith(key.split("encoder.", 1)[-1]))
    assert not torch.allclose(base[base_key], tuned[key])  # the weights changed
    cfg = EngineConfig.model_validate(
        {"retriever": "dense", "dense": {"model_name_or_path": str(out), "device": "cpu"}}
    )
    dense = Engine.build(tiny_catalog(), cfg)
    assert FeedbackStage(FeedbackConfig(), llm=_trace_llm()).use_prefix(dense.context) is True
    tr: dict[str, Any] = {}
    FeedbackStage(FeedbackConfig(), llm=_trace_llm()).run("send an email", [], dense.context, tr)
    assert tr["iteration_prefix"] is True and tr["stop_reason"] == "llm_na"
