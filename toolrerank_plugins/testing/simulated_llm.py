"""A *simulated* host LLM of known quality ``p``, for measuring how much of a good answer the LLM stages turn
into ranking. It is a simulation built from the benchmark's gold labels, not a language model: its numbers say
what our stages do with answers of a given quality, never what a real model would answer.

It answers each stage's real prompt through the LLM port (the stages build their prompts and parse the answers
exactly as for a real model). For every call it draws, with probability ``p``, the answer a good model would
give, and otherwise one a poor model gives; the draw is seeded by ``(seed, prompt)``, so runs repeat.

**What it reads** — nothing else:

1. the prompt text the stage sends: which prompt it is (its fixed instructions), the user's request or the
   current instruction inside it, and the tool documents shown (``<tool_documents>``);
2. the gold labels of the labelled query whose request that is: the ids of its relevant APIs, and those APIs'
   catalog records (name, tool, category, description);
3. for a *wrong* query-generation answer only: one non-gold API of the catalog — a sibling of a gold API (same
   tool, else same category, else any), seeded — standing in for a poor model's wrong idea of an API (query
   generation shows the model no tools to be wrong about).

It also remembers the refinements it wrote itself, so that the feedback loop's later rounds (whose prompt holds
the refined instruction, not the request) are answered for the same labelled query, as a model in one
conversation would.

**Good answers** (probability ``p`` per call):

- query generation: one line per gold API (at most ``max_items``): its name as words and the first
  ``words`` words of its description;
- QTA rewrite: one line naming each gold API the same way (8 words of description each); a gold API whose
  document the prompt shows is named by its name only (a good model does not copy the text it was shown);
- feedback: comprehension and assessment in plain prose naming the gold APIs; refinement ``N/A`` when every
  gold API is shown and they hold the first places, else a refined instruction built like the QTA rewrite.

**Poor answers** (probability ``1 - p``; one mode drawn uniformly per call):

- ``wrong_tool``: a plausible but wrong API — the description of a non-gold API (a shown one when the prompt
  shows tools, else the catalog sibling of item 3);
- ``off_topic``: an unrelated request ("find a recipe for chocolate cake");
- ``malformed``: output no parser can use (empty, symbols, JSON without text);
- ``echo``: the prompt itself;
- ``chat``: an answer to the user instead of the task ("Sure, I can help you with that! ...");
- feedback's refinement also ``wrong_judgement``: ``N/A`` although gold APIs are missing or ranked low.

Feedback's comprehension and assessment calls draw too, but both kinds of answer are prose (the refinement
carries the judgement); only the refinement's draw changes the ranking.

Example:
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> from toolrerank_plugins.records import LabelledQuery
    >>> from toolrerank_plugins.llm.prompts import QUERY_GENERATION
    >>> q = LabelledQuery("q1", "is it raining in Paris?", ("Weather/SkyCast/current",))
    >>> sim = SimulatedLLM(tiny_catalog(), [q], p=1.0)
    >>> sim.complete(QUERY_GENERATION.format(query=q.query, max_queries=5))
    'current weather: Current weather conditions in a city'
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.llm.base import Message, as_messages
from toolrerank_plugins.llm.parsing import copy_tokens, parse_refinement, split_identifier
from toolrerank_plugins.llm.prompts import normalise
from toolrerank_plugins.records import LabelledQuery, ToolSpec

#: Unrelated requests for ``off_topic`` answers.
OFF_TOPIC = (
    "find a recipe for chocolate cake with dark chocolate",
    "translate a poem from French into Japanese",
    "recommend hiking trails near a mountain lake",
    "calculate the orbital period of a satellite",
    "identify the bird species from a song recording",
    "suggest names for a golden retriever puppy",
)
MALFORMED = ("", "{}", "[[[ ]]] ### *** ///", "```\n```", "...")
MODES = ("wrong_tool", "off_topic", "malformed", "echo", "chat")

_HUMAN = re.compile(r"Human: (.*?)\nAnswer:", re.S)
_USER_REQUEST = re.compile(r"<user_request>\n(.*?)\n</user_request>", re.S)
_INSTRUCTION = re.compile(r"<instruction>\n(.*?)\n</instruction>", re.S)
_DOC = re.compile(r'^\[\d+\] (".*")$', re.M)


def _key(text: str) -> str:
    return " ".join(copy_tokens(text))[:400]


def _words(text: str | None, n: int) -> str:
    w = normalise(text).replace('"', "").split()
    return " ".join(w[:n])


def describe(spec: ToolSpec, words: int = 16) -> str:
    """An API as a good answer names it: its name as words and the start of its description."""
    desc = _words(spec.description, words)
    name = split_identifier(spec.name)
    return f"{name}: {desc}" if desc else name


class SimulatedLLM:
    """The simulated host LLM (see the module docstring: what it reads, and how it answers).

    Args:
        catalog: the catalog the labelled queries' gold ids belong to.
        queries: the labelled queries it may be asked about (their requests and gold ids).
        p: the probability of a good answer per call, in ``[0, 1]``.
        seed: seeds every draw (with the prompt).
        latency_s: sleep before every answer (the configured latency of the simulated model).
        max_items: lines of a good query-generation answer (the stage's ``max_queries``).
        words: description words per API in a good query-generation answer.

    ``answers`` counts the answers given, by prompt kind and ``good`` / poor mode.
    """

    def __init__(
        self,
        catalog: Catalog,
        queries: Sequence[LabelledQuery],
        *,
        p: float,
        seed: int = 0,
        latency_s: float = 0.0,
        max_items: int = 5,
        words: int = 16,
    ) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.catalog = catalog
        self.p = p
        self.seed = seed
        self.latency_s = latency_s
        self.max_items = max_items
        self.words = words
        self._gold: dict[str, tuple[ToolSpec, ...]] = {}
        for q in queries:
            specs = tuple(catalog[i] for i in q.relevant if i in catalog)
            if specs:
                self._gold.setdefault(_key(q.query), specs)
        self._own: dict[str, str] = {}  # key of a refinement it wrote -> key of the request
        self._lock = threading.Lock()
        self.answers: Counter[tuple[str, str]] = Counter()

    def __repr__(self) -> str:
        return f"SimulatedLLM(p={self.p}, seed={self.seed}, queries={len(self._gold)})"

    # -- reading the prompt ----------------------------------------------------------------------------
    @staticmethod
    def kind(text: str) -> str:
        """Which stage prompt this is: ``query_generation``, ``qta``, ``comprehension``, ``assessment``,
        ``refinement`` or ``unknown``."""
        if "Step 1 - Comprehension" in text:
            return "comprehension"
        if "Step 2 - Assessment" in text:
            return "assessment"
        if "Step 3 - Refinement" in text:
            return "refinement"
        if "<user_request>" in text:
            return "qta"
        if _HUMAN.search(text):
            return "query_generation"
        return "unknown"

    def _request(self, text: str, kind: str) -> str:
        pattern = {"query_generation": _HUMAN, "qta": _USER_REQUEST}.get(kind, _INSTRUCTION)
        m = pattern.search(text)
        return m.group(1) if m else ""

    def _origin(self, request: str) -> str | None:
        key = _key(request)
        if key in self._gold:
            return key
        with self._lock:
            return self._own.get(key)

    @staticmethod
    def shown(text: str) -> list[str]:
        """The tool documents the prompt shows, as plain text (``category / tool / name: description ...``)."""
        block = (
            text.split("<tool_documents>", 1)[-1].split("</tool_documents>", 1)[0] if "<tool_documents>" in text else ""
        )
        out = []
        for m in _DOC.finditer(block):
            try:
                out.append(str(json.loads(m.group(1))))
            except ValueError:
                continue
        return out

    @staticmethod
    def _head(spec: ToolSpec) -> str:
        return normalise(" / ".join(x for x in (spec.category, spec.tool, spec.name) if x) + ":")

    # -- answering -----------------------------------------------------------------------------------
    def _rng(self, text: str) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}\x00{text}".encode("utf-8", "surrogatepass")).digest()
        return random.Random(int.from_bytes(digest[:8], "little"))

    def _sibling(self, gold: Sequence[ToolSpec], rng: random.Random) -> ToolSpec | None:
        ids = {g.id for g in gold}
        g = rng.choice(list(gold))
        pools = (
            [t for t in self.catalog if t.id not in ids and g.tool and t.tool == g.tool],
            [t for t in self.catalog if t.id not in ids and g.category and t.category == g.category],
            [t for t in self.catalog if t.id not in ids],
        )
        pool = next((p for p in pools if p), [])
        return rng.choice(pool) if pool else None

    def _named(self, gold: Sequence[ToolSpec], shown: Sequence[str], words: int) -> list[str]:
        heads = [s.split(":", 1)[0] + ":" for s in shown]
        return [split_identifier(g.name) if self._head(g) in heads else describe(g, words) for g in gold]

    def _poor(
        self, kind: str, text: str, request: str, gold: Sequence[ToolSpec], rng: random.Random
    ) -> tuple[str, str]:
        modes = MODES + (("wrong_judgement",) if kind == "refinement" else ())
        mode = rng.choice(modes)
        if mode == "wrong_tool":
            shown = [s for s in self.shown(text) if not any(s.startswith(self._head(g)[:-1]) for g in gold)]
            if shown:
                name, _, desc = rng.choice(shown).partition(": ")
                wrong = f"{split_identifier(name.split(' / ')[-1])}: {_words(desc, 10)}"
            else:
                sib = self._sibling(gold, rng) if gold else None
                wrong = describe(sib, self.words) if sib else rng.choice(OFF_TOPIC)
            return mode, wrong
        if mode == "off_topic":
            return mode, rng.choice(OFF_TOPIC)
        if mode == "malformed":
            return mode, rng.choice(MALFORMED)
        if mode == "echo":
            return mode, text
        if mode == "chat":
            return mode, f"Sure, I can help you with that! {_words(request, 25)}"
        return mode, "N/A"  # wrong_judgement

    def _good(self, kind: str, text: str, request: str, gold: Sequence[ToolSpec]) -> str:
        if kind == "query_generation":
            return "\n".join(describe(g, self.words) for g in gold[: self.max_items])
        shown = self.shown(text)
        if kind == "qta":
            return "; ".join(self._named(gold, shown, 8))
        names = ", ".join(split_identifier(g.name) for g in gold)
        if kind == "comprehension":
            return f"The user needs these functions: {names}. The retrieved tools cover related services."
        if kind == "assessment":
            return f"The goals need {names}; some of them are missing from the retrieved tools or ranked too low."
        heads = [s.split(":", 1)[0] + ":" for s in shown]
        placed = [next((i for i, h in enumerate(heads) if h == self._head(g)), None) for g in gold]
        if all(i is not None and i < len(gold) for i in placed):
            return "N/A"
        return "Refined instruction: " + "; ".join(self._named(gold, shown, 8))

    def answer(self, text: str) -> str:
        """The simulated answer to one prompt (also recorded in :attr:`answers`)."""
        kind = self.kind(text)
        request = self._request(text, kind)
        origin = self._origin(request)
        gold = self._gold.get(origin) if origin else None
        rng = self._rng(text)
        if kind == "unknown" or not gold:
            out, label = ("N/A" if kind == "refinement" else _words(request, 30) or "N/A"), "unlabelled"
        elif kind in ("comprehension", "assessment"):
            good = rng.random() < self.p
            out = self._good(kind, text, request, gold) if good else f"The user asks about {rng.choice(OFF_TOPIC)}."
            label = "good" if good else "off_topic"
        elif rng.random() < self.p:
            out, label = self._good(kind, text, request, gold), "good"
        else:
            label, out = self._poor(kind, text, request, gold, rng)
        if kind == "refinement" and origin:
            refined = parse_refinement(out).query
            if refined:
                with self._lock:
                    self._own.setdefault(_key(refined), origin)
        with self._lock:
            self.answers[(kind, label)] += 1
        return out

    def complete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        text = "\n".join(m["content"] for m in as_messages(prompt))
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.answer(text)

    async def acomplete(
        self,
        prompt: str | Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        text = "\n".join(m["content"] for m in as_messages(prompt))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self.answer(text)

    def stats(self) -> dict[str, Any]:
        """Answers given, as ``{"kind/label": count}``."""
        return {f"{k}/{label}": n for (k, label), n in sorted(self.answers.items())}
