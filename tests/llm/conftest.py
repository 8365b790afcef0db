from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolrerank_plugins.llm.registry import known_llms, unregister_llm


@pytest.fixture(autouse=True)
def _clean_llm_registry() -> Iterator[None]:
    """Tests register LLMs by name; none may leak into the next test."""
    before = set(known_llms())
    yield
    for name in set(known_llms()) - before:
        unregister_llm(name)
    unregister_llm("default")
