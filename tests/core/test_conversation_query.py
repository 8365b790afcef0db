"""The conversation query the adapters search with: the current message first, then the earlier turns."""

from __future__ import annotations

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.selection import Turn, conversation_query
from toolrerank_plugins.testing import tiny_catalog

TURNS = [
    Turn("user", "Send an email to Bob about the meeting"),
    Turn("assistant", "Sure. Which address?"),
    Turn("tool", "address book: bob@example.com"),
    Turn("user", "bob@example.com, and the weather forecast for Oslo too"),
]


def test_the_current_message_comes_first_then_earlier_turns_oldest_first() -> None:
    assert conversation_query(TURNS) == (
        "bob@example.com, and the weather forecast for Oslo too\n"
        "Send an email to Bob about the meeting\n"
        "Sure. Which address?"
    )
    assert conversation_query(TURNS, history_turns=1) == (
        "bob@example.com, and the weather forecast for Oslo too\nSure. Which address?"
    )
    assert conversation_query(TURNS, history_turns=0) == "bob@example.com, and the weather forecast for Oslo too"
    assert conversation_query([Turn("assistant", "hello")]) == ""
    with pytest.raises(ValueError, match="history_turns"):
        conversation_query(TURNS, history_turns=-1)


def test_a_follow_up_without_an_asking_word_is_still_a_request_of_the_default_pipeline() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "multi_intent"}]))
    turns = [
        Turn("user", "Send an email to Bob about the meeting"),
        Turn("assistant", "Done. Anything else?"),
        Turn("user", "the weather forecast for Oslo tomorrow"),
    ]
    detailed = engine.search_detailed(conversation_query(turns), top_k=3)
    requests = detailed.trace["multi_intent"]["requests"]
    assert requests[0] == "the weather forecast for Oslo tomorrow"  # the current message, though it asks nothing
    assert "Send an email to Bob about the meeting" in requests  # an earlier request that still asks
    assert any(h.id.startswith("Weather/") for h in detailed.results[:2])
