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
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import RenamedFieldsModel
from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.llm import prompts
from toolrerank_plugins.llm.base import LLM, LLMError
from toolrerank_plugins.llm.parsing import (
    COPY_MIN_WORDS,
    ECHO_NGRAM,
    CopyVerdict,
    clip,
    content_words,
    copied_fraction,
    copies_document,
    copy_tokens,
    is_answer,
    is_chat,
    is_placeholder,
    restates,
    shingles,
    strip_markup,
)
from toolrerank_plugins.llm.registry import resolve_llm
from toolrerank_plugins.llm.runtime import LLMRuntime, LLMSession, RuntimeConfig
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber
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
    hold_copied: bool = Field(
        True,
        description="an API whose description (as shown in the prompt) an LLM-made query copies does not rise "
        "above its rank in the incoming ranking (3+ of the query's own words, at least half of them, in runs of 3 "
        "words of that description); False: off (the papers' behaviour)",
    )
    screen_answers: bool = Field(
        True,
        description="drop LLM-made queries that are useless: chat addressed to the user ('Sure, I can help'), "
        "restatements of the request (no content word of their own), and off-catalog ones (none of their top "
        "off_catalog_depth APIs is in the incoming ranking); the stage keeps the last good ranking when none is "
        "left (trace: 'dropped', fallback 'unusable_output: chat | restates_request | off_catalog'); False: off",
    )
    off_catalog_depth: int = Field(
        10,
        ge=1,
        description="an LLM-made query whose top this-many APIs are all outside the incoming ranking is "
        "off-catalog (see screen_answers; judged when the incoming ranking holds twice this many APIs or more)",
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
    score_scale = (
        "the ranking this LLM stage merged from the request's and the LLM's queries: higher is better "
        "(how it merged: the stage's trace)"
    )

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

    def screen(
        self,
        texts: Sequence[str],
        requests: Sequence[str],
        trace: dict[str, Any],
        *,
        step: str = "",
        max_words: int | None = None,
        invented: Sequence[str] = (),
        answers: bool = False,
        min_words: int = 1,
    ) -> list[str]:
        """``texts`` without the useless ones (``screen_answers``), URLs and tags removed from the rest.

        Dropped: text with no content word once URLs, tags and link targets are gone (``garbage``); text of
        template words only ("API: API_Name", ``placeholder``); a text that repeats an earlier one's content
        words (``repeated``: a degenerate answer that says the same line again); with ``answers`` (the texts
        should describe APIs or rewrite the request), a statement that answers the user's question instead
        (``answer``: "The lead actor of Titanic is a male."; :func:`~toolrerank_plugins.llm.parsing.is_answer`);
        a text of fewer than ``min_words`` distinct content words (``too_short``: a fragment such as "The Ref"
        cannot stand for the request it replaces); chat
        addressed to the user or about the task (``chat``); restatements of the request (``restates_request``:
        no content word that ``requests`` — the user's request, and for feedback the current instruction — do
        not already have); with ``max_words``, text longer than that (``too_long``: it ignored the prompt's
        length limit); text that is nothing but API names the catalog does not have (``invented``: "Song List
        API") is ``off_catalog``. Each drop is listed in ``trace["dropped"]``; when nothing is left the plan falls back
        with ``unusable_output: <the most frequent reason>``.
        """
        if not self.config.screen_answers or not texts:
            return list(texts)
        request = " ".join(requests)
        made_up = {w for name in invented for w in content_words(name)}
        kept: list[str] = []
        dropped: list[dict[str, Any]] = []
        seen: set[frozenset[str]] = set()
        for t in texts:
            clean = strip_markup(t)
            words = content_words(clean)
            distinct = frozenset(words)
            if not words:
                reason: str | None = "garbage"
            elif made_up and distinct <= made_up:
                reason = "off_catalog"
            elif is_chat(clean):
                reason = "chat"
            elif is_placeholder(clean):
                reason = "placeholder"
            elif answers and is_answer(clean):
                reason = "answer"
            elif len(distinct) < min_words:
                reason = "too_short"
            elif distinct in seen:
                reason = "repeated"
            elif restates(clean, request):
                reason = "restates_request"
            elif max_words is not None and len(clean.split()) > max_words:
                reason = "too_long"
            else:
                reason = None
            if distinct:
                seen.add(distinct)
            if reason is None:
                kept.append(clean)
            else:
                dropped.append({"text": clip(t, 120), "reason": reason})
        if dropped:
            trace.setdefault("dropped", []).extend(dropped)
        if not kept:
            (reason, _), *_ = Counter(d["reason"] for d in dropped).most_common(1)  # ties: the first seen
            raise self.fail(f"{step}unusable_output: {reason}")
        return kept

    def on_catalog(
        self,
        texts: Sequence[str],
        rankings: Sequence[Sequence[ScoredTool]],
        reference: Sequence[ScoredTool],
        trace: dict[str, Any],
        *,
        step: str = "",
    ) -> list[int]:
        """Indices of the LLM-made queries whose retrieval is on-catalog (``screen_answers``): at least one of
        their top ``off_catalog_depth`` APIs is in ``reference`` (the incoming ranking; judged only when it holds
        at least twice that many APIs). A query that shares
        none describes nothing the catalog holds for this request (an API the model made up, another topic).
        Drops are listed in ``trace["dropped"]``; when none is left the plan falls back with
        ``unusable_output: off_catalog``.
        """
        n = self.config.off_catalog_depth
        # judged only against a full ranking: a request that retrieved few APIs (BM25 over a small catalog keeps
        # only APIs sharing a word) says little about where the rest of the catalog stands
        if not self.config.screen_answers or len(reference) < 2 * n:
            return list(range(len(rankings)))
        ref = {s.id for s in reference}
        keep = [i for i, r in enumerate(rankings) if any(s.id in ref for s in r[:n])]
        dropped = [
            {"text": clip(texts[i], 120), "reason": "off_catalog"} for i in range(len(rankings)) if i not in keep
        ]
        if dropped:
            trace.setdefault("dropped", []).extend(dropped)
        if not keep:
            raise self.fail(f"{step}unusable_output: off_catalog")
        return keep

    def note_named(self, trace: dict[str, Any], names: Sequence[str]) -> None:
        """Remember API identifiers the LLM wrote (``universal_helper``, ``OmniTool``) for :meth:`guard`."""
        named = trace.setdefault("_named", [])
        named.extend(k for k in (" ".join(copy_tokens(n)) for n in names) if k and k not in named)

    def note_llm_queries(self, trace: dict[str, Any], queries: Sequence[str], shown: Sequence[ToolSpec]) -> None:
        """Remember LLM-made queries the stage retrieves with, and the tool documents their prompt showed, for
        :meth:`guard` (``hold_copied``): a query that copies one of those documents cannot lift its API."""
        if not self.config.hold_copied:
            return
        docs = trace.setdefault("_shown", {})
        for t in shown:  # the description as the prompt showed it (normalised, capped)
            docs.setdefault(t.id, prompts.normalise(t.description)[: self.config.max_tool_chars])
        trace.setdefault("_queries", []).extend(q for q in queries if q)

    def copied_apis(self, query: str, queries: Sequence[str], shown: dict[str, str]) -> dict[str, str]:
        """API id -> the first LLM-made query that copies its shown description (see ``hold_copied``)."""
        if not queries or not shown:
            return {}
        user = set(copy_tokens(query))
        out: dict[str, str] = {}
        for api, doc in shown.items():
            grams = shingles(doc, ECHO_NGRAM)
            hit = next((q for q in queries if copies_document(q, grams, user)), None) if grams else None
            if hit is not None:
                out[api] = hit
        return out

    def guard(
        self,
        ranking: list[ScoredTool],
        original: Sequence[ScoredTool],
        trace: dict[str, Any],
        named: Sequence[str] = (),
        copied: dict[str, str] | None = None,
    ) -> list[ScoredTool]:
        """Ranks 1..``protected_top`` hold only APIs that the incoming (original) ranking vouches for, and no
        API rises above its incoming rank on a query that copies its description (``copied``).

        An API that only LLM-made queries retrieved — the LLM's word alone — enters at rank
        ``protected_top + 1`` at best; so does an API the LLM named by its identifier (``named``: keys of
        :meth:`note_named`) or whose description an LLM-made query copied (``copied``: from
        :meth:`copied_apis`), unless the original ranking has it in its own top ``protected_top``. The next
        vouched-for APIs move up (in the LLM's order; the original's own top when the LLM ranking has too
        few), the held ones follow in their order. Then each copied API that stands above its rank in the
        original ranking goes back down to that rank (after the original's APIs when it was not there): a
        tool description that gets the LLM to repeat it (injected text) cannot lift its own API. Held APIs
        are listed in ``trace["guard"]``; scores become 1/rank when anything moved.
        """
        copied = copied or {}
        n = self.config.protected_top
        if not original or not ranking:
            return ranking
        out = ranking
        if n > 0:
            top_ids = {s.id for s in original[:n]}
            keys = set(named)
            supported = {s.id for s in original}

            def vouched(s: ScoredTool) -> bool:
                if s.id in top_ids:
                    return True
                if s.id not in supported or s.id in copied:
                    return False
                return not keys or not ({" ".join(copy_tokens(x)) for x in (s.tool.name, s.tool.tool) if x} & keys)

            if not all(vouched(s) for s in ranking[:n]):
                taken = {s.id for s in ranking}
                head = [s for s in ranking if vouched(s)][:n]
                head += [s for s in original if s.id not in taken and vouched(s)][: n - len(head)]
                head_ids = {s.id for s in head}
                out = (head + [s for s in ranking if s.id not in head_ids])[: max(len(ranking), len(head))]
                trace["guard"] = {"held_below_top": [s.id for s in ranking[:n] if not vouched(s)], "top": n}
        out = self._hold_copied(out, original, copied, trace)
        if out is ranking:
            return ranking
        return self.scored(out, [1.0 / i for i in range(1, len(out) + 1)])

    @staticmethod
    def _hold_copied(
        ranking: list[ScoredTool], original: Sequence[ScoredTool], copied: dict[str, str], trace: dict[str, Any]
    ) -> list[ScoredTool]:
        """``ranking`` with each copied API moved down to its rank in ``original`` when it stands above it."""
        if not copied:
            return ranking
        where = {s.id: i for i, s in enumerate(original)}
        floors = {
            s.id: where.get(s.id, len(original))
            for i, s in enumerate(ranking)
            if s.id in copied and i < where.get(s.id, len(original))
        }
        if not floors:
            return ranking
        out = [s for s in ranking if s.id not in floors]
        for s in sorted((s for s in ranking if s.id in floors), key=lambda s: floors[s.id]):
            out.insert(min(floors[s.id], len(out)), s)
        trace.setdefault("guard", {})["held_copied"] = [
            {"id": s.id, "rank": out.index(s) + 1, "query": clip(copied[s.id], 120)} for s in out if s.id in floors
        ]
        return out

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
        query: str,
        candidates: list[ScoredTool],
        trace: dict[str, Any],
        result: list[ScoredTool] | None,
        error: BaseException | None,
        started: float,
    ) -> list[ScoredTool]:
        good = trace.pop("_last_good", None)
        named = trace.pop("_named", [])
        copied = self.copied_apis(query, trace.pop("_queries", []), trace.pop("_shown", {}))
        trace["usage"] = session.usage.to_dict()
        total_ms = (time.perf_counter() - started) * 1000
        trace["overhead_ms"] = round(max(0.0, total_ms - session.usage.llm_time_ms), 3)
        if error is None and result is not None:
            return self.guard(result, candidates, trace, named, copied)
        if isinstance(error, _Fallback):
            reason = error.reason
        else:
            reason = f"internal_error: {type(error).__name__}: {error}"
            logger.warning("stage %r failed unexpectedly (%s); keeping the last good ranking", self.name, reason)
        if self.config.on_error == "raise":
            raise LLMStageError(f"stage {self.name!r}: {reason}") from error
        trace["fallback"] = reason
        return self.guard(list(good), candidates, trace, named, copied) if good is not None else list(candidates)

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
        return self._finish(session, query, candidates, trace, result, error, started)

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
        return self._finish(session, query, candidates, trace, result, error, started)


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
