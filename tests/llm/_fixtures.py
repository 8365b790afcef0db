"""Importable helpers for CLI tests (``--llm tests.llm._fixtures:make_llm``)."""

from __future__ import annotations

from toolrerank_plugins.testing import ScriptedLLM


def make_llm() -> ScriptedLLM:
    return ScriptedLLM(
        rules=[
            (r"Rewritten query:", "Rewritten query: get the weather forecast for a city"),
            (r"Step 1 - Comprehension", "The user wants the weather. Tools: forecast, current weather."),
            (r"Step 2 - Assessment", "The forecast tool solves the goal; ranking is fine."),
            (r"Step 3 - Refinement", "N/A"),
        ],
        default="1. Weather forecast for a city\n2. Send an email message",
    )
