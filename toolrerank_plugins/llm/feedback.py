"""Iterative feedback (Xu et al.): the LLM critiques the current top-K and refines the instruction, T rounds.

Each round makes three calls — comprehension, assessment, refinement — over the current top-K tools.
The loop stops when the LLM answers "N/A" (no refinement needed), after ``rounds`` rounds (paper: T=3,
K=10), when a refinement repeats an earlier one, or on any failure; the final list is the last good round's.
With ``iteration_prefix`` each retrieval query is prefixed "Iteration t: " as the paper does with its
iteration-aware retriever (``None`` = on exactly when the engine's dense model was trained by
:func:`toolrerank_plugins.llm.feedback_training.train_feedback_retriever`). The per-round trace
(queries, rankings, feedback) is kept under ``trace["rounds"]`` for users and for training.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

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
from toolrerank_plugins.llm.parsing import clip, is_garbage, is_refusal, parse_refinement, restates
from toolrerank_plugins.llm.query_generation import unknown_names
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.stages import StageType

if TYPE_CHECKING:
    from toolrerank_plugins.stages import StageContext

#: File written next to a model trained with the iteration prefix (read by ``iteration_prefix=None``).
FEEDBACK_MARKER = "toolrerank_feedback.json"
DEFAULT_PREFIX = "Iteration {t}: "


def with_iteration(query: str, t: int, fmt: str = DEFAULT_PREFIX) -> str:
    """The paper's iteration-aware query: ``"Iteration t: <query>"``."""
    return fmt.format(t=t) + query


class FeedbackConfig(LLMStageConfig):
    """Parameters of the ``iterative_feedback`` stage."""

    rounds: int = Field(3, ge=1, le=10, description="T, the most refinement rounds")
    n_tools: int = Field(10, ge=1, le=50, description="K, tools shown to the LLM per round (was top_k)")
    depth: int | None = Field(
        None, ge=1, description="retrieval depth per round (was top_depth); None: the candidate count"
    )
    iteration_prefix: bool | None = Field(None, description="prefix queries with 'Iteration t: ' (None: auto)")
    prefix_format: str = DEFAULT_PREFIX
    max_tokens: int = Field(400, ge=1, description="completion cap of each of the three calls")
    max_feedback_chars: int = Field(1500, ge=100, description="cap on comprehension/assessment passed on")

    renamed_fields: ClassVar[Mapping[str, str]] = {"top_k": "n_tools", "top_depth": "depth"}

    @property
    def top_k(self) -> Any:
        """Deprecated name of :attr:`n_tools`."""
        warn_renamed("FeedbackConfig", "top_k", "n_tools")
        return self.n_tools

    @property
    def top_depth(self) -> Any:
        """Deprecated name of :attr:`depth`."""
        warn_renamed("FeedbackConfig", "top_depth", "depth")
        return self.depth


def _norm(q: str) -> str:
    return " ".join("".join(ch.lower() if ch.isalnum() else " " for ch in q).split())


class FeedbackStage(LLMStage):
    """Iterative LLM feedback (see the module docstring)."""

    name = "iterative_feedback"
    config: FeedbackConfig

    def use_prefix(self, ctx: StageContext) -> bool:
        if self.config.iteration_prefix is not None:
            return self.config.iteration_prefix
        if ctx.encoder_path is None:
            return False
        path = Path(ctx.encoder_path).expanduser()
        return (path / FEEDBACK_MARKER).is_file()

    def _check(self, text: str | LLMError, step: str) -> str:
        if isinstance(text, LLMError):
            raise self.fail(f"{step}: {error_reason(text)}")
        t = text.strip()
        if not t:
            raise self.fail(f"{step}: empty")
        if is_refusal(t[:300]):
            raise self.fail(f"{step}: refusal")
        if is_garbage(t[:2000]):
            raise self.fail(f"{step}: garbage")
        return clip(t, self.config.max_feedback_chars)

    def restates_current(self, refined: str, query: str, current: str, trace: dict[str, Any]) -> bool:
        """A later round's refinement with no content word that the request and the current (already refined)
        instruction lack adds nothing: the loop stops there (``screen_answers``), as on ``N/A``."""
        if not self.config.screen_answers or not restates(refined, f"{query} {current}"):
            return False
        trace.setdefault("dropped", []).append({"text": clip(refined, 120), "reason": "restates_instruction"})
        return True

    def plan(self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]) -> Plan:
        c = self.config
        depth = c.depth or max(len(candidates), c.n_tools, ctx.depth)
        prefix = self.use_prefix(ctx)
        trace["iteration_prefix"] = prefix

        def q_for(q: str, t: int) -> str:
            return with_iteration(q, t, c.prefix_format) if prefix else q

        ranking = candidates
        if prefix:
            (ranking,) = yield Retrieve((q_for(query, 0),), depth)
            trace["_last_good"] = ranking
        rounds: list[dict[str, Any]] = [{"round": 0, "query": query, "ranking": [s.id for s in ranking[: c.n_tools]]}]
        trace["rounds"] = rounds
        seen = {_norm(query)}
        current = query
        stop = "max_rounds"
        for t in range(c.rounds):
            shown = [s.tool for s in ranking[: c.n_tools]]
            block = prompts.tool_block(shown, max_chars_per_tool=c.max_tool_chars)
            q_text = prompts.user_text(current)
            (out,) = yield LLMCall(
                (prompts.FEEDBACK_COMPREHENSION.format(query=q_text, tools=block),), c.temperature, c.max_tokens
            )
            comprehension = self._check(out, f"round {t + 1} comprehension")
            # the LLM's own text read third-party documents: it goes on escaped like them
            passed = prompts.user_text(comprehension, c.max_feedback_chars)
            (out,) = yield LLMCall(
                (prompts.FEEDBACK_ASSESSMENT.format(query=q_text, tools=block, comprehension=passed),),
                c.temperature,
                c.max_tokens,
            )
            assessment = self._check(out, f"round {t + 1} assessment")
            (out,) = yield LLMCall(
                (
                    prompts.FEEDBACK_REFINEMENT.format(
                        query=q_text, tools=block, assessment=prompts.user_text(assessment, c.max_feedback_chars)
                    ),
                ),
                c.temperature,
                c.max_tokens,
            )
            if isinstance(out, LLMError):
                raise self.fail(f"round {t + 1} refinement: {error_reason(out)}")
            parsed = parse_refinement(out, max_chars=c.max_query_chars)
            rounds[-1]["feedback"] = {
                "comprehension": clip(comprehension, 400),
                "assessment": clip(assessment, 400),
                "refinement": clip(out, 400),
            }
            if parsed.kind == "stop":
                stop = "llm_na"
                break
            if parsed.kind == "invalid" or parsed.query is None:
                raise self.fail(f"round {t + 1} refinement: unusable_output: {parsed.status}")
            if parsed.api_names:
                trace.setdefault("invented_api_names", []).extend(unknown_names(ctx, parsed.api_names))
                self.note_named(trace, parsed.api_names)
            sources = PromptSources(
                prompts.FEEDBACK_REFINEMENT.format(query="", tools="", assessment=""),
                tuple(prompts.tool_text(x, c.max_tool_chars) for x in shown),
                (query, current),
            )
            (refined,) = self.reject_copies([parsed.query], sources, trace, step=f"round {t + 1} refinement: ")
            self.note_llm_queries(trace, [refined], shown)
            key = _norm(refined)
            if key in seen:
                stop = "repeated_refinement"
                break
            if t > 0 and self.restates_current(refined, query, current, trace):
                stop = "restates_instruction"  # nothing new to add to the last round's instruction: done
                break
            (refined,) = self.screen(
                [refined], (query, current), trace, step=f"round {t + 1} refinement: ", answers=True, min_words=2
            )
            seen.add(key)
            current = refined
            (ranking,) = yield Retrieve((q_for(current, t + 1),), depth)
            if not ranking:
                raise self.fail(f"round {t + 1}: empty_retrieval")
            self.on_catalog([refined], [ranking], candidates, trace, step=f"round {t + 1} refinement: ")
            trace["_last_good"] = ranking
            rounds.append({"round": t + 1, "query": current, "ranking": [s.id for s in ranking[: c.n_tools]]})
        trace["stop_reason"] = stop
        trace["final_query"] = current
        return self.scored(ranking)


def _factory(cfg: FeedbackConfig, ctx: StageContext, path: Path | None) -> FeedbackStage:
    return FeedbackStage(cfg)


STAGE_TYPE = StageType(config_model=FeedbackConfig, factory=_factory)
