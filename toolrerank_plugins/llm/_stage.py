"""What the three LLM stages share: config fields, LLM lookup, fallback, and one plan run two ways.

A stage's logic is written once, as a generator (a *plan*) that yields requests — :class:`LLMCall` (prompts
for the LLM) or :class:`Retrieve` (queries for the first stage) — and receives their results. A sync driver
(:meth:`LLMStage.run`) and an async driver (:meth:`LLMStage.arun`) execute the same plan, so the sync and
async paths cannot drift apart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import RenamedFieldsModel
from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.llm.base import LLM, LLMError
from toolrerank_plugins.llm.parsing import (
    COPY_MIN_WORDS,
    CopyVerdict,
    clip,
    copied_fraction,
    copy_tokens,
    shingles,
)
from toolrerank_plugins.llm.registry import resolve_llm
from toolrerank_plugins.llm.runtime import LLMRuntime, LLMSession, RuntimeConfig
from toolrerank_plugins.records import ScoredTool, renumber
from toolrerank_plugins.stages import Stage

if TYPE_CHECKING:
    from toolrerank_plugins.stages import StageContext

logger = logging.getLogger(__name__)


class LLMStageError(ToolRerankError):
    """An LLM stage failed and its config says ``on_error="raise"``."""


class LLMStageConfig(RenamedFieldsModel):
    """Fields every LLM stage has."""

    model_config = ConfigDict(extra="forbid")

    llm: str = Field("default", description="name of an LLM registered with register_llm()")
    temperature: float | None = Field(None, ge=0, description="None: the model's default")
    max_tokens: int = Field(256, ge=1, description="completion cap asked of the LLM")
    max_query_chars: int = Field(300, ge=16, description="cap on every LLM-made query string")
    max_tool_chars: int = Field(300, ge=32, description="cap on each tool description shown to the LLM")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    max_copied_fraction: float | None = Field(
        0.5,
        gt=0,
        le=1,
        description="an LLM-made query of 8+ words whose word 5-grams come from its prompt's instructions or "
        "tool documents at least this much is rejected (prompt echo, a copied tool description); None: off",
    )
    protected_top: int = Field(
        1,
        ge=0,
        description="ranks 1..N hold only APIs the incoming ranking holds: an API that only LLM-made queries "
        "found (the LLM's word alone) enters at rank N+1 at best; 0: off (the papers' behaviour)",
    )
    on_error: Literal["fallback", "raise"] = Field(
        "fallback", description="fallback: keep the last good ranking and record why; raise: LLMStageError"
    )


@dataclass(frozen=True)
class LLMCall:
    """Ask the LLM these prompts (concurrently when several); results are ``str | LLMError``."""

    prompts: tuple[str, ...]
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Retrieve:
    """First-stage retrieval for these queries at depth ``k``; the result is one ranking per query."""

    queries: tuple[str, ...]
    k: int


Request = LLMCall | Retrieve
Plan = Generator[Request, Any, list[ScoredTool]]


@dataclass(frozen=True)
class PromptSources:
    """What an LLM answer must not merely repeat: the prompt's own instructions and the tool documents shown
    (plain text); ``user`` texts are the request's words, which an answer may always repeat."""

    instructions: str
    documents: tuple[str, ...] = ()
    user: tuple[str, ...] = ()


class _Fallback(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LLMStage(Stage):
    """Base of the LLM stages. Subclasses implement :meth:`plan`."""

    name: str = "llm"
    score_scale = "the ranking this LLM stage merged from the request's and the LLM's queries: higher is better "\
        "(how it merged: the stage's trace)"

    def __init__(self, config: LLMStageConfig, *, llm: LLM | None = None, runtime: LLMRuntime | None = None) -> None:
        self.config = config
        self.llm = llm
        self.runtime = runtime or LLMRuntime(config.runtime)
        self._warned_no_llm = False

    # -- to implement ------------------------------------------------------------------------------
    def plan(self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]) -> Plan:
        raise NotImplementedError

    # -- helpers for plans ---------------------------------------------------------------------------
    def fail(self, reason: str) -> _Fallback:
        """``raise self.fail("why")`` inside a plan: keep the last good ranking (or raise if configured)."""
        return _Fallback(reason)

    def reject_copies(
        self, texts: Sequence[str], sources: PromptSources, trace: dict[str, Any], *, step: str = ""
    ) -> list[str]:
        """``texts`` without those copied from the prompt (see ``max_copied_fraction``).

        A text of 8+ words is copied when at least ``max_copied_fraction`` of its word 5-grams (the user's own
        5-grams aside) come from the prompt's instructions or the tool documents shown; a shorter one (3+
        words) when it is a verbatim run of the instructions. Each rejection is listed in
        ``trace["copied"]``. When half the texts or more are copies, the whole answer is (an echo): the plan
        falls back with ``unusable_output: echo`` (mostly the instructions) or
        ``unusable_output: copied_tool_documents``.
        """
        limit = self.config.max_copied_fraction
        if limit is None or not texts:
            return list(texts)
        grams = {
            "echo": shingles(sources.instructions),
            "copied_tool_documents": set().union(*(shingles(d) for d in sources.documents)),
        }
        own = set().union(*(shingles(u) for u in sources.user))
        instructions = f" {' '.join(copy_tokens(sources.instructions))} "
        user = f" {' '.join(t for u in sources.user for t in copy_tokens(u))} "
        kept: list[str] = []
        rejected: list[dict[str, Any]] = []
        for t in texts:
            verdict = copied_fraction(t, grams, own)
            words = " ".join(copy_tokens(t))
            if verdict.fraction < limit and 3 <= len(words.split()) < COPY_MIN_WORDS:
                if f" {words} " in instructions and f" {words} " not in user:
                    verdict = CopyVerdict(1.0, "echo")
            if verdict.fraction >= limit:
                rejected.append({"text": clip(t, 120), **verdict.to_dict()})
            else:
                kept.append(t)
        if rejected:
            trace.setdefault("copied", []).extend(rejected)
        if len(rejected) >= len(kept):
            sources_seen = [r["source"] for r in rejected]
            main = max(set(sources_seen), key=sources_seen.count)
            raise self.fail(f"{step}unusable_output: {main}")
        return kept

    def note_named(self, trace: dict[str, Any], names: Sequence[str]) -> None:
        """Remember API identifiers the LLM wrote (``universal_helper``, ``OmniTool``) for :meth:`guard`."""
        named = trace.setdefault("_named", [])
        named.extend(k for k in (" ".join(copy_tokens(n)) for n in names) if k and k not in named)

    def guard(
        self,
        ranking: list[ScoredTool],
        original: Sequence[ScoredTool],
        trace: dict[str, Any],
        named: Sequence[str] = (),
    ) -> list[ScoredTool]:
        """Ranks 1..``protected_top`` hold only APIs that the incoming (original) ranking vouches for.

        An API that only LLM-made queries retrieved — the LLM's word alone — enters at rank
        ``protected_top + 1`` at best; so does an API the LLM named by its identifier (``named``: keys of
        :meth:`note_named`), unless the original ranking has it in its own top ``protected_top``. The next
        vouched-for APIs move up (in the LLM's order; the original's own top when the LLM ranking has too
        few), the held ones follow in their order. Held APIs are listed in ``trace["guard"]``; scores become
        1/rank when anything moved.
        """
        n = self.config.protected_top
        if n <= 0 or not original or not ranking:
            return ranking
        top_ids = {s.id for s in original[:n]}
        keys = set(named)

        def vouched(s: ScoredTool) -> bool:
            if s.id in top_ids:
                return True
            if s.id not in supported:
                return False
            return not keys or not ({" ".join(copy_tokens(x)) for x in (s.tool.name, s.tool.tool) if x} & keys)

        supported = {s.id for s in original}
        if all(vouched(s) for s in ranking[:n]):
            return ranking
        taken = {s.id for s in ranking}
        head = [s for s in ranking if vouched(s)][:n]
        head += [s for s in original if s.id not in taken and vouched(s)][: n - len(head)]
        head_ids = {s.id for s in head}
        out = (head + [s for s in ranking if s.id not in head_ids])[: max(len(ranking), len(head))]
        trace["guard"] = {"held_below_top": [s.id for s in ranking[:n] if not vouched(s)], "top": n}
        return self.scored(out, [1.0 / i for i in range(1, len(out) + 1)])

    def scored(self, ranking: Sequence[ScoredTool], scores: Sequence[float] | None = None) -> list[ScoredTool]:
        """Record this stage's score on each item (default: the item's current score) and renumber."""
        vals = scores if scores is not None else [s.score for s in ranking]
        return renumber([s.with_stage(self.name, v) for s, v in zip(ranking, vals)])

    # -- drivers ---------------------------------------------------------------------------------------
    def _start(self, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]) -> LLMSession | None:
        llm = resolve_llm(self.config.llm, self.llm, ctx)
        if llm is None:
            msg = (
                f"stage {self.name!r}: no LLM named {self.config.llm!r} is registered; call "
                f"toolrerank_plugins.llm.register_llm({self.config.llm!r}, your_llm) before searching"
            )
            if self.config.on_error == "raise":
                raise LLMStageError(msg)
            if not self._warned_no_llm:
                logger.warning("%s; returning first-stage results unchanged", msg)
                self._warned_no_llm = True
            trace["fallback"] = "no_llm"
            trace["usage"] = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "llm_time_ms": 0.0}
            return None
        return self.runtime.session(llm)

    def _finish(
        self,
        session: LLMSession,
        candidates: list[ScoredTool],
        trace: dict[str, Any],
        result: list[ScoredTool] | None,
        error: BaseException | None,
        started: float,
    ) -> list[ScoredTool]:
        good = trace.pop("_last_good", None)
        named = trace.pop("_named", [])
        trace["usage"] = session.usage.to_dict()
        total_ms = (time.perf_counter() - started) * 1000
        trace["overhead_ms"] = round(max(0.0, total_ms - session.usage.llm_time_ms), 3)
        if error is None and result is not None:
            return self.guard(result, candidates, trace, named)
        if isinstance(error, _Fallback):
            reason = error.reason
        else:
            reason = f"internal_error: {type(error).__name__}: {error}"
            logger.warning("stage %r failed unexpectedly (%s); keeping the last good ranking", self.name, reason)
        if self.config.on_error == "raise":
            raise LLMStageError(f"stage {self.name!r}: {reason}") from error
        trace["fallback"] = reason
        return self.guard(list(good), candidates, trace, named) if good is not None else list(candidates)

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        session = self._start(candidates, ctx, trace)
        if session is None:
            return list(candidates)
        started = time.perf_counter()
        trace["_last_good"] = list(candidates)
        gen = self.plan(query, candidates, ctx, trace)
        result: list[ScoredTool] | None = None
        error: BaseException | None = None
        try:
            req = next(gen)
            while True:
                if isinstance(req, LLMCall):
                    out: Any = session.complete_many(
                        list(req.prompts), temperature=req.temperature, max_tokens=req.max_tokens
                    )
                else:
                    out = ctx.retrieve(list(req.queries), req.k)
                req = gen.send(out)
        except StopIteration as stop:
            result = stop.value
        except (LLMStageError, KeyboardInterrupt):
            raise
        except Exception as exc:
            error = exc
        finally:
            gen.close()
        return self._finish(session, candidates, trace, result, error, started)

    async def arun(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        """Async twin of :meth:`run`: LLM calls are awaited, retrieval runs in a worker thread."""
        session = self._start(candidates, ctx, trace)
        if session is None:
            return list(candidates)
        started = time.perf_counter()
        trace["_last_good"] = list(candidates)
        gen = self.plan(query, candidates, ctx, trace)
        result: list[ScoredTool] | None = None
        error: BaseException | None = None
        try:
            req = next(gen)
            while True:
                if isinstance(req, LLMCall):
                    out: Any = await session.acomplete_many(
                        list(req.prompts), temperature=req.temperature, max_tokens=req.max_tokens
                    )
                else:
                    out = await asyncio.to_thread(ctx.retrieve, list(req.queries), req.k)
                req = gen.send(out)
        except StopIteration as stop:
            result = stop.value
        except (LLMStageError, KeyboardInterrupt, asyncio.CancelledError):
            raise
        except Exception as exc:
            error = exc
        finally:
            gen.close()
        return self._finish(session, candidates, trace, result, error, started)


def first_error(results: Sequence[str | LLMError]) -> LLMError | None:
    return next((r for r in results if isinstance(r, LLMError)), None)


def error_reason(exc: LLMError) -> str:
    from toolrerank_plugins.llm.base import LLMTimeoutError
    from toolrerank_plugins.llm.runtime import BudgetExceededError

    if isinstance(exc, BudgetExceededError):
        return f"budget_exceeded: {exc}"
    if isinstance(exc, LLMTimeoutError):
        return f"timeout: {exc}"
    return f"llm_error: {exc}"
