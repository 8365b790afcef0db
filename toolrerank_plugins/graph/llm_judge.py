"""The host LLM as a dependency discriminator over candidate pairs (zero training).

One prompt per candidate pair; the answer is parsed robustly: a JSON object ``{"answer": "A"|"B"|"none"}``,
or a bare ``A`` / ``B`` / ``none`` on the first line, or a sentence naming one of them. Anything else
counts as "no dependency" and is counted in :attr:`LLMDependencyJudge.unparsed` (never a guessed edge).

Example:
    >>> class Always:
    ...     def complete(self, prompt, **kw): return '{"answer": "B"}'
    ...     async def acomplete(self, prompt, **kw): return '{"answer": "B"}'
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> judge = LLMDependencyJudge(Always())
    >>> [(e.source, e.target) for e in judge.edges(tiny_catalog(), [("Auth/Keyring/login", "Auth/Keyring/logout")])]
    [('Auth/Keyring/login', 'Auth/Keyring/logout')]
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Literal

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.discriminator import pair_text
from toolrerank_plugins.llm.base import LLM, LLMError
from toolrerank_plugins.records import Edge

logger = logging.getLogger(__name__)

Verdict = Literal["A", "B", "none"]

PROMPT = """You decide whether one API depends on another. API X depends on API Y when X needs Y's output as \
an input (for example a token, an id, coordinates), or Y must be called first to validate or authorise X.

API A: {a}

API B: {b}

Which is true?
- "A": A depends on B (call B first)
- "B": B depends on A (call A first)
- "none": neither depends on the other

Answer with JSON only: {{"answer": "A"}}, {{"answer": "B"}} or {{"answer": "none"}}."""

_JSON = re.compile(r"\{[^{}]*\}", re.DOTALL)
_ANSWER = re.compile(r"answer\W{0,3}(?:is\W{0,3})?\b(a|b|none|neither)\b", re.IGNORECASE)
_NONE = re.compile(r"\b(neither|no dependency|none)\b", re.IGNORECASE)


def parse_verdict(text: str) -> Verdict | None:
    """``"A"``, ``"B"``, ``"none"`` or ``None`` when the answer cannot be read.

    Example:
        >>> parse_verdict('```json\\n{"answer": "b"}\\n```'), parse_verdict("A")
        ('B', 'A')
        >>> parse_verdict("Neither."), parse_verdict("?")
        ('none', None)
        >>> parse_verdict("There is a link. Answer: B"), parse_verdict("I think a dependency exists")
        ('B', None)
    """
    if not isinstance(text, str):
        return None
    for m in _JSON.finditer(text):
        try:
            obj = json.loads(m.group(0))
        except (ValueError, RecursionError):  # JSONDecodeError; an integer past Python's 4,300 digits
            continue
        if isinstance(obj, dict):
            val = obj.get("answer", obj.get("dependency"))
            if isinstance(val, str):
                v = val.strip().strip('"').lower()
                if v in ("a", "b"):
                    return "A" if v == "a" else "B"
                if v in ("none", "neither", "no"):
                    return "none"
    stripped = text.strip().strip("`").strip()
    first = stripped.splitlines()[0].strip().strip('".:').lower() if stripped else ""
    if first in ("a", "b"):
        return "A" if first == "a" else "B"
    if first in ("none", "neither", "no"):
        return "none"
    # Free text: only an explicit "answer: X" counts; a lone article "a" must never become an edge.
    m2 = _ANSWER.search(stripped)
    if m2 is not None:
        w = m2.group(1).lower()
        return "A" if w == "a" else "B" if w == "b" else "none"
    return "none" if _NONE.search(stripped) else None


class LLMDependencyJudge:
    """Asks an :class:`~toolrerank_plugins.llm.base.LLM` about each candidate pair.

    Args:
        llm: the host LLM (port protocol).
        max_pairs: at most this many pairs are asked (the first ones; candidates come best first).
        max_tokens: answer budget per pair.
        on_error: ``raise`` on an :class:`LLMError`, or ``skip`` the pair (counted in :attr:`errors`).
    """

    def __init__(
        self, llm: LLM, *, max_pairs: int = 2000, max_tokens: int = 20, on_error: Literal["raise", "skip"] = "skip"
    ) -> None:
        self.llm = llm
        self.max_pairs = max_pairs
        self.max_tokens = max_tokens
        self.on_error = on_error
        self.calls = 0
        self.unparsed = 0
        self.errors = 0

    def judge(self, text_a: str, text_b: str) -> Verdict | None:
        self.calls += 1
        try:
            answer = self.llm.complete(PROMPT.format(a=text_a, b=text_b), temperature=0.0, max_tokens=self.max_tokens)
        except LLMError:
            if self.on_error == "raise":
                raise
            self.errors += 1
            return None
        verdict = parse_verdict(answer)
        if verdict is None:
            self.unparsed += 1
            logger.debug("unreadable LLM dependency verdict: %r", answer[:200])
        return verdict

    def edges(self, catalog: Catalog, pairs: Sequence[tuple[str, str]]) -> list[Edge]:
        """An edge per pair the LLM says is dependent (``Edge(source=prerequisite, target=dependent)``)."""
        out = []
        if len(pairs) > self.max_pairs:
            logger.warning("LLM judge asked about the first %d of %d candidate pairs", self.max_pairs, len(pairs))
        for a, b in list(pairs)[: self.max_pairs]:
            verdict = self.judge(pair_text(catalog[a]), pair_text(catalog[b]))
            if verdict == "A":
                out.append(Edge(b, a, origin="llm"))
            elif verdict == "B":
                out.append(Edge(a, b, origin="llm"))
        return out
