"""QTA query rewriting: the LLM rewrites the query after reading a sample of tool documents.

As in the QTA paper (Eq. 3), the sample is random by default (seeded per query, so a query always sees the
same tools); ``sample="top"`` shows the top-retrieved candidates instead. The rewrite is retrieved with the
frozen first stage; with ``include_original`` the rewrite's ranking is interleaved with the original's.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from toolrerank_plugins._compat import warn_renamed
from toolrerank_plugins.llm import prompts
from toolrerank_plugins.llm._stage import (
    LLMCall,
    LLMStage,
    LLMStageConfig,
    Plan,
    PromptSources,
    Retrieve,
    error_reason,
)
from toolrerank_plugins.llm.base import LLMError
from toolrerank_plugins.llm.parsing import clip, parse_rewrite
from toolrerank_plugins.llm.query_generation import interleave, unknown_names
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.stages import StageType

if TYPE_CHECKING:
    from toolrerank_plugins.stages import StageContext


class QTAConfig(LLMStageConfig):
    """Parameters of the ``qta_rewrite`` stage."""

    sample: Literal["random", "top"] = Field("random", description="tool documents shown: random (paper) or top")
    n_tools: int = Field(10, ge=0, le=100, description="tool documents shown to the LLM")
    seed: int = 0
    include_original: bool = Field(False, description="interleave the original ranking with the rewrite's")
    depth: int | None = Field(None, ge=1, description="retrieval depth (was top_k); None: the candidate count")
    template: str | None = Field(None, description="custom prompt with {tools} and {query} fields")

    renamed_fields: ClassVar[Mapping[str, str]] = {"top_k": "depth"}

    @property
    def top_k(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("QTAConfig", "top_k", "depth")
        return self.depth


def sample_tools(ctx: StageContext, query: str, n: int, seed: int) -> list[ToolSpec]:
    """``n`` random APIs of the catalog, the same ones every time for the same (query, seed)."""
    ids = ctx.catalog.ids
    digest = hashlib.sha256(f"{seed}\x00{query}".encode("utf-8", "surrogatepass")).digest()  # any str
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    return [ctx.catalog[i] for i in rng.sample(ids, min(n, len(ids)))]


class QTAStage(LLMStage):
    """QTA rewriting (see the module docstring)."""

    name = "qta_rewrite"
    config: QTAConfig

    def tools_for(self, query: str, candidates: list[ScoredTool], ctx: StageContext) -> list[ToolSpec]:
        c = self.config
        if c.sample == "top":
            return [s.tool for s in candidates[: c.n_tools]]
        return sample_tools(ctx, query, c.n_tools, c.seed)

    def prompt_for(self, query: str, tools: list[ToolSpec]) -> str:
        block = prompts.tool_block(tools, max_chars_per_tool=self.config.max_tool_chars)
        return (self.config.template or prompts.QTA_REWRITE).format(tools=block, query=prompts.user_text(query))

    def plan(self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]) -> Plan:
        c = self.config
        tools = self.tools_for(query, candidates, ctx)
        trace["shown_tools"] = [t.id for t in tools]
        (out,) = yield LLMCall((self.prompt_for(query, tools),), c.temperature, c.max_tokens)
        if isinstance(out, LLMError):
            raise self.fail(error_reason(out))
        trace["raw_output"] = clip(out, 600)
        parsed = parse_rewrite(out, max_chars=c.max_query_chars)
        trace["parse"] = parsed.to_dict()
        if parsed.api_names:
            trace["invented_api_names"] = unknown_names(ctx, parsed.api_names)
            self.note_named(trace, parsed.api_names)
        if parsed.text is None:
            raise self.fail(f"unusable_output: {parsed.status}")
        sources = PromptSources(
            (c.template or prompts.QTA_REWRITE).format(tools="", query=""),
            tuple(prompts.tool_text(t, c.max_tool_chars) for t in tools),
            (query,),
        )
        (rewrite,) = self.reject_copies([parsed.text], sources, trace)
        (rewrite,) = self.screen(
            [rewrite], (query,), trace, invented=trace.get("invented_api_names", []), answers=True, min_words=2
        )
        trace["rewrite"] = rewrite
        self.note_llm_queries(trace, [rewrite], tools)
        k = c.depth or max(len(candidates), ctx.depth)
        (ranking,) = yield Retrieve((rewrite,), k)
        if not ranking:
            raise self.fail("empty_retrieval")
        self.on_catalog([rewrite], [ranking], candidates, trace)
        if c.include_original:
            merged = interleave([ranking, candidates[:k]], k)
            return self.scored(merged, [1.0 / i for i in range(1, len(merged) + 1)])
        return self.scored(ranking)


def _factory(cfg: QTAConfig, ctx: StageContext, path: Path | None) -> QTAStage:
    return QTAStage(cfg)


STAGE_TYPE = StageType(config_model=QTAConfig, factory=_factory)
