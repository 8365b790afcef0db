"""Query generation (Kachuee et al.): the LLM describes the APIs a request needs; each description is a query.

Per query: one LLM call with the paper's zero-shot prompt (or the intent prompt), a tolerant parse, one
first-stage retrieval per generated query, and the paper's interleaving (take one from each list in turn,
skipping duplicates). The original utterance's ranking (the incoming candidates) joins the interleave last,
as in their ablation B.1 (``include_original``, on by default).

Example:
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import ScriptedLLM, tiny_catalog
    >>> from toolrerank_plugins.llm import register_llm
    >>> register_llm("default", ScriptedLLM(default="1. Geocode a street address\\n2. Current weather in a city"))
    >>> cfg = EngineConfig(retriever="bm25", stages=[{"type": "query_generation"}])
    >>> engine = Engine.build(tiny_catalog(), cfg)
    >>> res = engine.search_detailed("is it raining at 10 Main Street?", top_k=2)
    >>> [r.tool.name for r in res.results]
    ['geocode', 'current_weather']
    >>> res.trace["query_generation"]["usage"]["llm_calls"]
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from toolrerank_plugins.llm.parsing import clip, parse_query_list
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.stages import StageType

if TYPE_CHECKING:
    from toolrerank_plugins.stages import StageContext


class QueryGenerationConfig(LLMStageConfig):
    """Parameters of the ``query_generation`` stage."""

    prompt: Literal["description", "intent"] = Field("description", description="Kachuee Fig. 2 or Fig. 5")
    template: str | None = Field(None, description="custom prompt with {query} and {max_queries} fields")
    max_queries: int = Field(5, ge=1, le=20, description="lines kept from the answer (the prompt asks for this)")
    include_original: bool = Field(True, description="interleave the original utterance's ranking last (B.1)")
    max_words: int | None = Field(
        20,
        ge=1,
        description="with screen_answers, a line of more than this many words is dropped (too_long): the prompt "
        "asks for descriptions of less than 20 words; None: no limit",
    )
    depth: int | None = Field(
        None, ge=1, description="depth per generated query (was top_k); None: the candidate count"
    )

    renamed_fields: ClassVar[Mapping[str, str]] = {"top_k": "depth"}

    @property
    def top_k(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("QueryGenerationConfig", "top_k", "depth")
        return self.depth


def interleave(rankings: Sequence[Sequence[ScoredTool]], limit: int) -> list[ScoredTool]:
    """Take one item from each ranking in turn (its next one not taken yet) until ``limit`` items.

    Example:
        >>> from toolrerank_plugins.records import ScoredTool, ToolSpec
        >>> a, b, c = (ScoredTool(ToolSpec(x, x), 1.0, 1) for x in "abc")
        >>> [s.id for s in interleave([[a, b], [a, c]], 5)]
        ['a', 'c', 'b']
    """
    out: list[ScoredTool] = []
    seen: set[str] = set()
    pos = [0] * len(rankings)
    while len(out) < limit:
        moved = False
        for j, r in enumerate(rankings):
            # each list contributes its next item not taken yet
            while pos[j] < len(r) and r[pos[j]].id in seen:
                pos[j] += 1
            if pos[j] < len(r):
                seen.add(r[pos[j]].id)
                out.append(r[pos[j]])
                pos[j] += 1
                moved = True
                if len(out) >= limit:
                    return out
        if not moved:
            break
    return out


class QueryGenerationStage(LLMStage):
    """LLM-generated retrieval queries, interleaved (see the module docstring)."""

    name = "query_generation"
    config: QueryGenerationConfig

    def template(self) -> str:
        c = self.config
        return c.template or (prompts.QUERY_GENERATION if c.prompt == "description" else prompts.INTENT_GENERATION)

    def prompt_for(self, query: str) -> str:
        return self.template().format(query=prompts.user_text(query), max_queries=self.config.max_queries)

    def plan(self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]) -> Plan:
        c = self.config
        (out,) = yield LLMCall((self.prompt_for(query),), c.temperature, c.max_tokens)
        if isinstance(out, LLMError):
            raise self.fail(error_reason(out))
        trace["raw_output"] = clip(out, 600)
        parsed = parse_query_list(out, max_items=c.max_queries, max_chars=c.max_query_chars)
        trace["parse"] = parsed.to_dict()
        if parsed.api_names:
            trace["invented_api_names"] = unknown_names(ctx, parsed.api_names)
            self.note_named(trace, parsed.api_names)
        if parsed.status != "ok":
            raise self.fail(f"unusable_output: {parsed.status}")
        sources = PromptSources(self.template().format(query="", max_queries=c.max_queries), user=(query,))
        items = self.reject_copies(parsed.items, sources, trace)
        invented = trace.get("invented_api_names", [])
        items = self.screen(items, (query,), trace, max_words=c.max_words, invented=invented, answers=True)
        k = c.depth or max(len(candidates), ctx.depth)
        rankings: list[list[ScoredTool]] = yield Retrieve(tuple(items), k)
        keep = self.on_catalog(items, rankings, candidates, trace)
        items, rankings = [items[i] for i in keep], [rankings[i] for i in keep]
        lists = list(rankings) + ([candidates[:k]] if c.include_original else [])
        merged = interleave(lists, k)
        trace["queries"] = items + ([query] if c.include_original else [])
        if not merged:
            raise self.fail("empty_retrieval")
        return self.scored(merged, [1.0 / i for i in range(1, len(merged) + 1)])


def unknown_names(ctx: StageContext, names: Sequence[str]) -> list[str]:
    """API-like names the LLM wrote that match no API or tool in the catalog (they were used as words only)."""
    known = ctx.known_names()
    return [n for n in dict.fromkeys(names) if n.lower() not in known]


def _factory(cfg: QueryGenerationConfig, ctx: StageContext, path: Path | None) -> QueryGenerationStage:
    return QueryGenerationStage(cfg)


STAGE_TYPE = StageType(config_model=QueryGenerationConfig, factory=_factory)
