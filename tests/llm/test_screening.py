"""Useless answers are detected and the stage keeps the ranking it was given (``screen_answers``, issue 30):
chat addressed to the user, restatements of the request, off-catalog queries; each says so in the trace."""

from __future__ import annotations

from typing import Any

import pytest

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.llm.feedback import FeedbackConfig, FeedbackStage
from toolrerank_plugins.llm.parsing import is_chat, is_placeholder, restates
from toolrerank_plugins.llm.qta import QTAConfig, QTAStage
from toolrerank_plugins.llm.query_generation import QueryGenerationConfig, QueryGenerationStage
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.testing import FakeEmbedder, ScriptedLLM, tiny_catalog


def _bm25() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", depth=10, stages=[]))


def _ids(r: list[ScoredTool]) -> list[str]:
    return [s.id for s in r]


# What SmolLM2-135M answered to the stages' prompts (benchmarks/llm_quality.py --mode real, api-bank, restbench).
SMOLLM2_ANSWERS = [
    "I'm ready to help. What's the request?",
    "Sure, I can help with that.",
    "Hi, I'm here to help with your schedule for your meeting tomorrow at 2pm.",
    "I can help you register on this app. Please provide your username, password, and email address.",
    "The user's goals cannot be solved by the retrieved tools, as they do not have the ability to optimize them.",
    "The most relevant tools for the user's instruction cannot be solved by the retrieved tools.",
    # a feedback refinement on NESTFUL glaive-136 (seed 1, 20 queries)
    "The user requested a refactored instruction that addresses their specific goals. The refactored instruction is:",
]


@pytest.mark.parametrize("text", SMOLLM2_ANSWERS)
def test_chat_addressed_to_the_user_is_recognised(text: str) -> None:
    assert is_chat(text)


@pytest.mark.parametrize(
    "text",
    [
        "Send an e-mail to a contact",
        "Get your account balance",
        "weather forecast for a city",
        "N/A",
        "I'm planning a trip to Rome and need hotels near the Colosseum",  # a refinement in the user's voice
        "Can you find the top tracks of Taylor Swift?",
    ],
)
def test_descriptions_and_queries_are_not_chat(text: str) -> None:
    assert not is_chat(text)


def test_restatement_means_no_content_word_of_its_own() -> None:
    request = "Can you help me add a schedule item for tomorrow at 9am at the coffee shop on Main Street?"
    assert restates("Add a schedule item for tomorrow at 9am at the coffee shop on Main Street", request)
    assert not restates("calendar API that creates an agenda entry", request)
    assert not restates("Order food for delivery", "plan a party: invite guests and order food")


def test_query_generation_drops_chat_and_restatements_and_falls_back_when_nothing_is_left() -> None:
    e = _bm25()
    q = "send an email message to my boss"
    cands = e.retrieve([q], 10)[0]
    llm = ScriptedLLM(default="I'm ready to help. What's the request?\nSend an email message to my boss")
    tr: dict[str, Any] = {}
    out = QueryGenerationStage(QueryGenerationConfig(), llm=llm).run(q, cands, e.context, tr)
    assert _ids(out) == _ids(cands) and tr["fallback"] == "unusable_output: chat"
    assert [d["reason"] for d in tr["dropped"]] == ["chat", "restates_request"]
    # a useful line beside them is kept, and only the useless ones are listed
    llm = ScriptedLLM(default="I'm ready to help. What's the request?\nlog in to the account with a password")
    tr = {}
    QueryGenerationStage(QueryGenerationConfig(), llm=llm).run(q, cands, e.context, tr)
    assert "fallback" not in tr and tr["queries"][0] == "log in to the account with a password"
    assert [d["reason"] for d in tr["dropped"]] == ["chat"]


# SmolLM2-135M's answer to query generation on RestBench's spotify-5 (benchmarks/llm_quality.py --mode real):
# template lines, one of them twice, that retrieved playlists and a TV show above two gold APIs.
SMOLLM2_TEMPLATE = (
    "The API that can help you with your request is: API: [API_Name](https://example.com/API_Name) Description: "
    "[API_Name](https://example.com/API_Name)\nAPI_Name\nAPI_Name"
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("API: API_Name", True),
        ("[Tool name](https://example.com/tool)", True),
        ("Description: your description here", True),
        ("API that returns the albums of an artist", False),
        ("Get the current weather", False),
    ],
)
def test_template_lines_are_placeholders(text: str, expected: bool) -> None:
    assert is_placeholder(text) is expected


def test_query_generation_drops_template_lines_and_repeats() -> None:
    e = _bm25()
    q = "send an email message to my boss"
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    out = QueryGenerationStage(QueryGenerationConfig(), llm=ScriptedLLM(default=SMOLLM2_TEMPLATE)).run(
        q, cands, e.context, tr
    )
    assert _ids(out) == _ids(cands) and tr["fallback"].startswith("unusable_output: ")
    assert {d["reason"] for d in tr["dropped"]} <= {"placeholder", "repeated", "chat"}
    assert "placeholder" in {d["reason"] for d in tr["dropped"]}
    # a line that says the same as an earlier one is dropped, the first is kept
    llm = ScriptedLLM(default="log in to the account with a password\nLog in to the account with a password!")
    tr = {}
    QueryGenerationStage(QueryGenerationConfig(), llm=llm).run(q, cands, e.context, tr)
    assert tr["queries"][:-1] == ["log in to the account with a password"]
    assert [d["reason"] for d in tr["dropped"]] == ["repeated"]


def test_screening_off_gives_the_papers_behaviour() -> None:
    e = _bm25()
    q = "send an email message to my boss"
    llm = ScriptedLLM(default="Sure, I can help with that.")
    tr: dict[str, Any] = {}
    QueryGenerationStage(QueryGenerationConfig(screen_answers=False), llm=llm).run(
        q, e.retrieve([q], 10)[0], e.context, tr
    )
    assert "fallback" not in tr and "dropped" not in tr


@pytest.mark.parametrize(
    ("q", "rewrite", "reason"),
    [
        ("send an email message to my boss", "Rewritten query: email message to my boss", "restates_request"),
        (
            "who is the lead actor of Titanic and what else did he play in?",
            "The lead actor of Titanic is a male.",
            "answer",
        ),
    ],
)
def test_a_useless_qta_rewrite_falls_back(q: str, rewrite: str, reason: str) -> None:
    e = _bm25()
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    out = QTAStage(QTAConfig(), llm=ScriptedLLM(default=rewrite)).run(q, cands, e.context, tr)
    assert _ids(out) == _ids(cands) and tr["fallback"] == f"unusable_output: {reason}"


def test_off_catalog_queries_are_dropped() -> None:
    # dense over the tiny catalog ranks every API; the incoming ranking: 4 APIs none of which the answer's
    # query ranks in its own top 2
    e = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", depth=10, stages=[]), embedder=FakeEmbedder())
    q = "send an email message"
    answer = "current weather conditions"
    top2 = _ids(e.retrieve([answer], 2)[0])
    cands = [s for s in e.retrieve([q], 10)[0] if s.id not in top2][:4]
    cfg = QueryGenerationConfig(off_catalog_depth=2)
    tr: dict[str, Any] = {}
    out = QueryGenerationStage(cfg, llm=ScriptedLLM(default=answer)).run(q, cands, e.context, tr)
    assert tr["fallback"] == "unusable_output: off_catalog" and _ids(out) == _ids(cands)
    assert tr["dropped"] == [{"text": answer, "reason": "off_catalog"}]
    # one of the answer's top 2 in the incoming ranking: on-catalog, used
    tr = {}
    QueryGenerationStage(cfg, llm=ScriptedLLM(default=answer)).run(
        q, [*cands[:3], *e.retrieve([answer], 1)[0]], e.context, tr
    )
    assert "fallback" not in tr and tr["queries"][0] == answer
    # an incoming ranking shorter than twice off_catalog_depth is not judged
    tr = {}
    QueryGenerationStage(cfg, llm=ScriptedLLM(default=answer)).run(q, cands[:3], e.context, tr)
    assert "fallback" not in tr


def _feedback_llm(refinements: list[str]) -> ScriptedLLM:
    return ScriptedLLM(
        rules=[
            (r"Step 1 - Comprehension", "The user wants to send a message; tools: mail."),
            (r"Step 2 - Assessment", "The mail tool solves it; login may be needed first."),
        ],
        responses=refinements,
    )


def test_feedback_chat_falls_back_and_a_later_restatement_stops() -> None:
    e = _bm25()
    q = "send an email message"
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    out = FeedbackStage(FeedbackConfig(), llm=_feedback_llm(["Sure, I can help you send it!"])).run(
        q, cands, e.context, tr
    )
    assert _ids(out) == _ids(cands) and tr["fallback"] == "round 1 refinement: unusable_output: chat"
    # round 2 adds nothing to round 1's instruction: a stop (the round-1 ranking is kept), not a failure
    llm = _feedback_llm(["send an email message after login with password", "email message login"])
    tr = {}
    FeedbackStage(FeedbackConfig(), llm=llm).run(q, cands, e.context, tr)
    assert "fallback" not in tr and tr["stop_reason"] == "restates_instruction" and len(tr["rounds"]) == 2
    assert tr["dropped"][-1]["reason"] == "restates_instruction"


def test_feedback_refinement_that_is_a_fragment_falls_back() -> None:
    # SmolLM2 on RestBench spotify-21 (seed 1, 20 queries): round 1's refinement was "The Ref"
    e = _bm25()
    q = "send an email message to my boss"
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    out = FeedbackStage(FeedbackConfig(), llm=_feedback_llm(["The Ref"])).run(q, cands, e.context, tr)
    assert _ids(out) == _ids(cands) and tr["fallback"] == "round 1 refinement: unusable_output: too_short"


# More of SmolLM2-135M's query-generation answers (RestBench sample, seed 0), each useless in its own way.
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("The API that can help with this request is: https://www.taylorswift.com/api/playlist/love", "chat"),
        ("https://www.youtube.com/watch?v=1YzY2YzNZYU&feature=youtubepub", "garbage"),
        ("<user_request> <search_query> <action> <name> <step> <revised_query>", "garbage"),
        (
            "The Game of Thrones API is a web service that provides a web-based game of thrones server that can be "
            "accessed using the REST API.",
            "too_long",
        ),
        ("[SongListAPI](https://www.youtube.com/watch?v=NzNjYzNjYzI)", "off_catalog"),
        ('Create a new playlist and name it "Qui...', "restates_request"),
        # RestBench (seed 1, 20 queries): it answered the question instead of describing an API
        ("The most trending TV show of today's most trending TV show is \"The Big Bang Theory\" by Netflix.", "answer"),
        ("The lead actor of Titanic is a masterful and complex figure with a rich and complex past.", "answer"),
        ("The third episode of Black Mirror is directed by the fourth season of Black Mirror.", "answer"),
    ],
)
def test_weak_model_answers_are_dropped_with_their_reason(answer: str, reason: str) -> None:
    e = _bm25()
    q = "Create a new playlist and name it Quiet, then add songs from the current queue"
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    out = QueryGenerationStage(QueryGenerationConfig(), llm=ScriptedLLM(default=answer)).run(q, cands, e.context, tr)
    assert _ids(out) == _ids(cands) and tr["fallback"] == f"unusable_output: {reason}"


def test_a_description_whose_subject_is_an_api_is_not_an_answer() -> None:
    e = _bm25()
    q = "who is the lead actor of Titanic and what else did he play in?"
    cands = e.retrieve([q], 10)[0]
    tr: dict[str, Any] = {}
    llm = ScriptedLLM(default="The geocoding API is used to turn a street address into coordinates")
    QueryGenerationStage(QueryGenerationConfig(), llm=llm).run(q, cands, e.context, tr)
    assert "answer" not in [d["reason"] for d in tr.get("dropped", [])]


def test_urls_and_tags_are_removed_from_a_query_that_is_kept() -> None:
    e = _bm25()
    q = "send an email message to my boss"
    llm = ScriptedLLM(default="<query>log in to the account with a password</query> https://example.com/login")
    tr: dict[str, Any] = {}
    QueryGenerationStage(QueryGenerationConfig(), llm=llm).run(q, e.retrieve([q], 10)[0], e.context, tr)
    assert tr["queries"][0] == "log in to the account with a password"
