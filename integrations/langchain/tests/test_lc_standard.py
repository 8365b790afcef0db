"""LangChain's standard retriever test suite (langchain-tests), when installed."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")
pytest.importorskip("pytest_asyncio")  # the suite's async test needs it (a langchain-tests dependency)

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402
from langchain_toolrerank import ToolRerankRetriever  # noqa: E402

from toolrerank_plugins.engine import Engine, EngineConfig  # noqa: E402
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog  # noqa: E402

_ENGINE = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())


# The suite mixes sync and async tests; pytest-asyncio (strict mode) needs the class mark for the async
# one and warns about the sync ones.
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function:pytest.PytestWarning")
class TestToolRerankRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[ToolRerankRetriever]:
        return ToolRerankRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"engine": _ENGINE, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "what is the weather tomorrow in Paris"
