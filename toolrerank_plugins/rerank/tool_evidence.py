"""Tool-level evidence without a trained model: APIs of a tool that matches strongly rise together.

The ToolRerank hierarchy groups APIs by their tool (a RapidAPI service, an MCP server): a request that
matches several APIs of one tool most likely wants that tool, and its other matching APIs belong near the
top too. The ``tool_evidence`` stage scores each candidate by its rank (``1 / (rank_k + rank)``), sums those
scores per tool over the leading ``window`` candidates, and adds ``weight`` times that tool score (relative
to the best tool's, in units of the top candidate's score) to each API of the tool. An API without a tool
counts as a tool of its own, so in a catalog that mixes both (NESTFUL: RapidAPI services beside stand-alone
functions) a lone candidate of a named tool gets no edge over a stand-alone function; catalogs without tools
are left as they are.

Example:
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "tool_evidence"}]))
    >>> engine.search("weather forecast for tomorrow", top_k=2)[0].tool.tool
    'SkyCast'
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.records import ScoredTool, renumber
from toolrerank_plugins.stages import Stage, StageContext, StageType

__all__ = ["ToolEvidenceConfig", "ToolEvidenceStage"]


class ToolEvidenceConfig(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    # Chosen on ToolBench *train* queries (docs/benchmarks/default_pipeline.md).
    window: int = Field(10, ge=1, description="leading candidates whose rank scores are summed per tool")
    weight: float = Field(0.3, ge=0, description="how much a tool's evidence lifts each of its APIs")
    rank_k: int = Field(1, ge=0, description="rank score of a candidate: 1 / (rank_k + rank)")


class ToolEvidenceStage(Stage):
    """Lifts the APIs of tools that several leading candidates belong to (see the module text).

    ``stage_scores["tool_evidence"]`` is the new score; the trace names the tools with the most evidence.
    """

    name = "tool_evidence"
    score_scale = (
        "1 / (rank_k + rank) plus the API's tool's share of the evidence of the leading results (weight-scaled): "
        "an API of a tool that several leading results belong to rises"
    )

    def __init__(self, config: ToolEvidenceConfig | None = None) -> None:
        self.config = config or ToolEvidenceConfig()

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        c = self.config
        if not candidates or c.weight == 0:
            return candidates
        if all(st.tool.tool is None for st in candidates[: c.window]):
            return candidates
        base = [1.0 / (c.rank_k + rank) for rank in range(1, len(candidates) + 1)]
        evidence: dict[str, float] = {}
        for st, score in zip(candidates[: c.window], base):
            key = st.tool.tool_key
            evidence[key] = evidence.get(key, 0.0) + score
        best = max(evidence.values())
        unit = c.weight * base[0] / best
        scored = [
            (score + unit * evidence.get(st.tool.tool_key, 0.0), i)
            for i, (st, score) in enumerate(zip(candidates, base))
        ]
        order = sorted(scored, key=lambda si: (-si[0], si[1]))
        tools = {st.tool.tool_key for st in candidates[: c.window] if st.tool.tool is not None}
        named = [(t, e) for t, e in sorted(evidence.items(), key=lambda kv: -kv[1]) if t in tools]
        trace["tools"] = {t: round(e / best, 3) for t, e in named[:5]}
        return renumber([candidates[i].with_stage(self.name, s) for s, i in order])


STAGE_TYPE = StageType(ToolEvidenceConfig, lambda cfg, ctx, path: ToolEvidenceStage(cfg))
