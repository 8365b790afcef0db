"""Multi-intent queries without an LLM: split a message into its requests and let each request's best tools surface.

"Can you fetch X? Additionally, get Y and Z" asks for several tools, but one embedding or one bag of words for
the whole message favours one of them. The ``multi_intent`` stage splits the message into requests with
rules (sentences, then cue words such as "additionally", "also", "then", then "and" in a short piece or before
an action verb), retrieves each request with the engine's first stage, and merges the whole-message ranking
and every request's ranking by reciprocal-rank fusion with a small constant (``rrf_k=1``: close to
interleaving, so each request's top tools reach the top ranks). A message with a single request is left
exactly as the first stage ranked it, unless it names a tool.

A request that names a catalog tool ("using the bitly tool", "search videos on Vimeo", "the URL Link Shortener
API") puts that tool's APIs first in its own ranking (``named_tools``): among 47k APIs a named service has
near-duplicates that match the words as well ("Vimeo Downloader" of another service). A name counts when a cue
word stands next to it (the / using / use / via / from / on / with before it, or tool / api / service / server
/ app after it) and it is distinctive: two words or more, or a word in the names of at most two tools.

A request's action verb picks among one thing's actions (``actions``): in a catalog with AddMeeting,
QueryMeeting, ModifyMeeting and DeleteMeeting (or ``GET`` / ``PUT`` / ``DELETE /me/albums``), all described with
the same words, "cancel my meeting" lets DeleteMeeting take the place of the first of the others in its ranking.
Verbs of one class count alike (cancel / delete / remove; check / query / show); a request without an action
verb is left where it is. An API whose name states no action but names more of the thing
(``AppointmentRegistration`` beside ``CancelRegistration``) counts as another action on it when both are of one
tool (or neither has one) and none of its extra words begins two or more of the catalog's API names (such a
word is a verb the lists lack: ``performDataAnalysis``, ``PlaySong``); any other API that states no action
never moves and is never passed.

Cost: the requests are searched in the same first-stage call as the message (:meth:`query_parts`), so a
message of n requests costs one first-stage call for n + 1 texts; a dense part encodes the requests on a spare
thread while the calling thread encodes the message where the process may use two CPUs
(``EngineConfig.parallel_requests``), else packed with the message into one encoder call, and searches all their
vectors in one call (ToolBench, 2 cores, 2026-11-28: 1.18x plain hybrid's p50 with one torch thread, median of
six runs). With
``requests_by="lexical"`` (the ``default-fast`` preset) a hybrid first stage matches the requests with BM25
alone and encodes only the message: about hybrid's time, for 1-4 points of Recall@5 on multi-request sets.
With ``pooled`` the message itself is searched with the mean of its requests' vectors, so each word is encoded
once; that lost 1.4 points of Recall@5 on ToolBench train and is off (docs/benchmarks/default_pipeline.md).

Example:
    >>> split_requests("Find a hotel in Rome. Also, what's the weather there tomorrow?")
    ['Find a hotel in Rome', "what's the weather there tomorrow?"]
    >>> split_requests("find me a hotel in Rome and the weather there")
    ['find me a hotel in Rome', 'the weather there']
    >>> split_requests("weather in Rome")
    ['weather in Rome']
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.records import ScoredTool, renumber
from toolrerank_plugins.retrieval.bm25 import split_identifier
from toolrerank_plugins.stages import QueryParts, Stage, StageContext, StageType

if TYPE_CHECKING:
    from collections.abc import Iterable

    from toolrerank_plugins.catalog import Catalog

__all__ = [
    "MultiIntentConfig",
    "MultiIntentStage",
    "ToolNames",
    "api_action",
    "by_action",
    "leading_words",
    "request_action",
    "split_requests",
]

# Sentence ends (., ?, !, ;) followed by space, and line breaks.
_SENTENCE = re.compile(r"(?<=[.?!;])\s+|\n+")
# Words that start a further request inside a sentence ("..., and also ...", "Additionally, ...").
_CUE = re.compile(
    r"\b(?:additionally|also|furthermore|moreover|besides|as well as|and then|then|after that|afterwards|"
    r"finally|in addition|next)\b[,:]?\s*",
    re.IGNORECASE,
)
# "and" between two requests of a short message ("find a hotel in Rome and the weather there"). In longer
# sentences "and" mostly joins the items of one request ("clubs, managers, teammates, and referees").
_AND = re.compile(r",?\s+\band\b\s+", re.IGNORECASE)
# Imperative verbs that start a request ("find ...", "and convert it ..."), and those that ask for a request's
# output ("show", "tell", "give", "provide").
_IMPERATIVES = (
    "get|find|search|list|book|send|add|delete|remove|cancel|create|set|update|change|check|open|calculate|convert|"
    "translate|recommend|fetch|retrieve|schedule|make|play|record|query|modify|register|look up|buy|order|call|"
    "reserve|compare"
)
_OUTPUT_VERBS = "show|tell|give|provide"
# ... except before a verb that starts another action ("I want the stock price of Microsoft and convert it to
# Indian Rupees"). Verbs that ask for the same request's output ("and provide me with its author", "and tell me
# the price") are left out: they mostly add detail to the request before them (Seal-Tools train).
_ACTION_VERB = rf"(?=(?:{_IMPERATIVES}|generate|suggest|share|download|obtain|gather|analy[sz]e)\b)"
_AND_VERB = re.compile(rf",?\s+\band\b\s+{_ACTION_VERB}", re.IGNORECASE)
# ``comma_verbs``: a comma before such a verb cuts too ("..., add a sheet named March, and ...").
_COMMA_VERB = re.compile(rf",\s+{_ACTION_VERB}", re.IGNORECASE)
_WORDS = re.compile(r"\w+")
_SEGMENT = re.compile(r"[./:]")
# Asking outright: a question, "can you", "please" (a sentence that does is never a preamble, below).
_OUTRIGHT = r"\?|\b(?:can|could|would|will) you\b|\bplease\b"
_ASKS_OUTRIGHT = re.compile(_OUTRIGHT, re.IGNORECASE)
# A line that asks for something: asking outright, a request phrase, or an imperative verb first. In a dialogue
# ("Can you book it?\nJohn Smith, March 3rd.\nYes, that's correct.") later lines mostly answer the assistant.
_ASKS = re.compile(
    _OUTRIGHT + r"|\bi(?:'d| would)? (?:like|want|need)\b|\bhelp me\b|"
    rf"\blet me\b|^\W*(?:also\W+|and\W+|then\W+)?(?:{_IMPERATIVES}|{_OUTPUT_VERBS})\b",
    re.IGNORECASE,
)
_STRIP = " \t,;:.-"
# A first sentence that describes the speaker ("I'm a film critic and ...", "As a teacher, ...", "My company is ...").
_PREAMBLE = re.compile(r"^\W*(?:i'?m|i am|we'?re|we are|my|our|as an?)\b", re.IGNORECASE)


def _n_words(text: str) -> int:
    return len(_WORDS.findall(text))


_NAME_WORDS = re.compile(r"[a-z0-9]+")
# Words next to a tool's name that make it a mention of the tool ("using the bitly tool", "on Vimeo").
_CUE_BEFORE = frozenset({"the", "using", "use", "via", "from", "on", "with"})
_CUE_AFTER = frozenset({"tool", "api", "service", "server", "app"})


def _name_words(text: str) -> tuple[str, ...]:
    return tuple(_NAME_WORDS.findall(text.lower()))


class ToolNames:
    """The catalog's tool names a request can name, and :meth:`mentioned` to find them in a text.

    A tool's name (an API without a tool: its own name) is matched as whole words, case and punctuation
    ignored, with a cue word next to it; only distinctive names count: two words or more, or a single word
    found in the names of at most two tools ("Vimeo", "bitly"; not "Weather" in a catalog of weather tools).

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> names = ToolNames(tiny_catalog())
        >>> sorted(names.mentioned("send it with the PostBox tool"))
        ['Mail/PostBox']
        >>> sorted(names.mentioned("what is a postbox"))
        []
    """

    def __init__(self, catalog: Catalog) -> None:
        found: dict[tuple[str, ...], set[str]] = {}
        for tid in catalog.ids:
            spec = catalog[tid]
            words = _name_words(spec.tool or spec.name)
            if words and len(" ".join(words)) >= 3:
                found.setdefault(words, set()).add(spec.tool_key)
        df = Counter(w for name in found for w in set(name))
        self._names = {n: frozenset(k) for n, k in found.items() if len(n) >= 2 or df[n[0]] <= 2}
        self._longest = max((len(n) for n in self._names), default=0)

    def __len__(self) -> int:
        return len(self._names)

    def mentioned(self, text: str) -> frozenset[str]:
        """The tool keys (:attr:`~toolrerank_plugins.records.ToolSpec.tool_key`) of the tools ``text`` names."""
        words = _name_words(text)
        out: set[str] = set()
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + self._longest) + 1):
                keys = self._names.get(words[i:j])
                if keys and ((i > 0 and words[i - 1] in _CUE_BEFORE) or (j < len(words) and words[j] in _CUE_AFTER)):
                    out |= keys
        return frozenset(out)


# What a request asks to do with a thing, and what an API's name says it does with one. Verbs of one class are
# interchangeable ("cancel" and "delete"); a catalog that offers several actions on one thing (AddMeeting,
# QueryMeeting, ModifyMeeting, DeleteMeeting) is then told apart by the request's verb.
_ACTION_VERBS: dict[str, tuple[str, ...]] = {
    "create": (
        "add", "create", "new", "insert", "post", "register", "open", "make", "generate", "book", "reserve",
        "order", "buy", "purchase", "submit", "upload", "save",
    ),
    "read": (
        "get", "query", "search", "find", "list", "show", "check", "fetch", "retrieve", "look", "lookup", "view",
        "display", "read", "tell", "see", "know", "browse",
    ),
    "update": (
        "modify", "change", "update", "edit", "reschedule", "move", "rename", "adjust", "put", "patch", "replace",
        "reset",
    ),
    "delete": ("delete", "remove", "cancel", "erase", "clear", "drop", "unsubscribe", "revoke"),
    "record": ("record", "log"),
}  # fmt: skip
_ACTION_OF = {verb: action for action, verbs in _ACTION_VERBS.items() for verb in verbs}


# Words after which a listed verb is a noun ("tracking an order", "the book", "details of the record", "in order
# to"): determiners and prepositions. Such a noun still names the request's action when "of" follows it ("give me
# the list of devices", "a search of"), and "new", the one adjective the lists hold, keeps its class after them
# ("I want a new account").
_NOUN_BEFORE = frozenset(
    "a an the my your his her its our their this that these those any some each every no "
    "of for with in on about from by into at".split()
)


def request_action(text: str) -> str | None:
    """The action class of a request's first action verb (create, read, update, delete, record), or None. A
    listed word after a determiner or a preposition is a noun there ("track an order", "the book"), not the
    request's verb, unless "of" follows it ("the list of devices").

    Example:
        >>> request_action("Can you cancel my appointment with Dr. Chen?"), request_action("weather in Rome")
        ('delete', None)
        >>> request_action("I need help with tracking an order"), request_action("Give me the list of devices")
        (None, 'read')
    """
    words = _WORDS.findall(text.lower())
    for i, word in enumerate(words):
        action = _ACTION_OF.get(word)
        if action is None:
            continue
        noun = i > 0 and words[i - 1] in _NOUN_BEFORE and word != "new"
        if not noun or (i + 1 < len(words) and words[i + 1] == "of"):
            return action
    return None


@lru_cache(maxsize=65536)
def api_action(name: str) -> tuple[str | None, frozenset[str]]:
    """The action class an API's name states and the thing it acts on.

    The action is that of the name's first action verb, None when it has none; the thing is the name's other
    words, a plural's "s" dropped.

    Example:
        >>> [(a, sorted(thing)) for a, thing in map(api_action, ["CancelRegistration", "AppointmentRegistration"])]
        [('delete', ['registration']), (None, ['appointment', 'registration'])]
        >>> api_action("GET /movies/{movie_id}")[0]
        'read'
    """
    action: str | None = None
    thing: set[str] = set()
    for raw in _WORDS.findall(name):
        for word in split_identifier(raw):
            verb = _ACTION_OF.get(word)
            if verb is None:
                thing.add(_singular(word))
            elif action is None:
                action = verb
    return action, frozenset(thing)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _leading_word(name: str) -> str | None:
    """The first word of an API name's last dotted / slashed segment (``Music.PlaySong``: ``play``), a plural's
    "s" dropped as in :func:`api_action`'s things."""
    segment = _SEGMENT.split(name.strip())[-1] or name
    for raw in _WORDS.findall(segment):
        for word in split_identifier(raw):
            return _singular(word)
    return None


def leading_words(names: Iterable[str], min_count: int = 2) -> frozenset[str]:
    """The words that begin at least ``min_count`` of ``names`` (their last dotted / slashed segment): in a
    catalog that names APIs verb-first these are its verbs, listed or not (``perform``, ``run``, ``play``).

    Example:
        >>> sorted(leading_words(["PlaySong", "Music.PlayMovie", "AppointmentRegistration", "CancelRegistration"]))
        ['play']
    """
    counts = Counter(w for w in map(_leading_word, names) if w is not None)
    return frozenset(w for w, n in counts.items() if n >= min_count)


def by_action(
    ranking: list[ScoredTool], action: str, window: int, verbs: frozenset[str] | None = None
) -> list[ScoredTool]:
    """Within the top ``window`` of ``ranking``, an API whose name states ``action`` takes the place of the first
    API above it that states another action on the same thing ("cancel my appointment": ``CancelRegistration``
    over ``QueryRegistration``); every other API keeps its place relative to the rest. Returns ``ranking``
    itself when nothing moves.

    With ``verbs`` (the catalog's :func:`leading_words`), an API that states no action counts as another action
    when it names more of the thing (``AppointmentRegistration`` over ``CancelRegistration``), belongs to the
    same tool (or neither has a tool) and none of its extra words is in ``verbs``."""
    head = list(ranking[:window])
    moved = False
    for i in range(len(head)):
        act, thing = api_action(head[i].tool.name)
        if act != action or not thing:
            continue
        for j in range(i):
            other, other_thing = api_action(head[j].tool.name)
            if (other is not None and other != action and other_thing == thing) or (
                verbs is not None
                and other is None
                and thing < other_thing
                and head[i].tool.tool == head[j].tool.tool
                and verbs.isdisjoint(other_thing - thing)
            ):
                head.insert(j, head.pop(i))
                moved = True
                break
    return head + ranking[window:] if moved else ranking


def _verbs_of(catalog: Catalog) -> frozenset[str]:
    return leading_words(catalog[tid].name for tid in catalog.ids)


def _named_first(ranking: list[ScoredTool], tools: frozenset[str]) -> list[ScoredTool]:
    """The APIs of ``tools`` first, each part in its own order."""
    return [c for c in ranking if c.tool.tool_key in tools] + [c for c in ranking if c.tool.tool_key not in tools]


def _cut_keeping(pattern: re.Pattern[str], piece: str, min_words: int) -> list[str]:
    """``piece`` cut where ``pattern`` matches, if every part keeps ``min_words`` words; else ``[piece]``."""
    parts = [p.strip(_STRIP) for p in pattern.split(piece)]
    return parts if all(_n_words(p) >= min_words for p in parts) else [piece]


def split_requests(
    text: str,
    *,
    min_words: int = 3,
    max_requests: int = 8,
    and_max_words: int = 12,
    lines: Literal["all", "asking"] = "all",
    preamble: Literal["request", "context"] = "request",
    and_verbs: bool = False,
    comma_verbs: bool = False,
) -> list[str]:
    """The requests in ``text``: its sentences, each cut again at cue words, and a piece of at most
    ``and_max_words`` words also at "and" when every part keeps ``min_words`` words; pieces of fewer than
    ``min_words`` words are dropped; at most ``max_requests`` (the first ones). A text that yields no piece
    is its own single request. ``lines="asking"``: after the first line, only lines that ask for something
    (a question, "can you", "please", "I need", an imperative verb first) hold requests; the others (a
    dialogue's answers: names, dates, "Yes, that's correct.") stay part of the whole message only.
    ``preamble="context"``: a first sentence that describes the speaker ("I'm a film critic and I need ...",
    "As a teacher, ...", "My company is ...") and does not ask outright is no request when more follow.
    ``and_verbs``: a longer piece is split at "and" too where an action verb follows ("... of Microsoft and
    convert it to Indian Rupees"), when every part keeps ``min_words`` words. ``comma_verbs`` (with
    ``and_verbs``): such a piece is split at a comma before an action verb too ("Calculate the discount of an
    item priced $100 at 20%, calculate its square, and create an invoice for it").

    Example:
        >>> split_requests("I want to know the current stock price of Microsoft and convert it to Indian Rupees.",
        ...                and_verbs=True)
        ['I want to know the current stock price of Microsoft', 'convert it to Indian Rupees']
    """
    if lines == "asking" and "\n" in text:
        first, *rest = [line for line in text.split("\n") if line.strip()] or [""]
        text = "\n".join([first, *(line for line in rest if _ASKS.search(line))])
    pieces: list[str] = []
    sentences = [s for s in _SENTENCE.split(text) if s.strip()]
    if (
        preamble == "context"
        and len(sentences) > 1
        and _PREAMBLE.search(sentences[0])
        and not _ASKS_OUTRIGHT.search(sentences[0])
    ):
        sentences = sentences[1:]
    for sentence in sentences:
        for piece in _CUE.split(sentence):
            piece = piece.strip(_STRIP)
            if _n_words(piece) < min_words:
                continue
            if _n_words(piece) <= and_max_words:
                parts = [p.strip(_STRIP) for p in _AND.split(piece)]
            elif and_verbs:
                parts = [p.strip(_STRIP) for p in _AND_VERB.split(piece)]
                if comma_verbs and all(_n_words(p) >= min_words for p in parts):  # each part cut again, alone
                    parts = [q for p in parts for q in _cut_keeping(_COMMA_VERB, p, min_words)]
            else:
                parts = [piece]
            pieces.extend(parts if all(_n_words(p) >= min_words for p in parts) else [piece])
    return pieces[:max_requests] or [text.strip()]


class MultiIntentConfig(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    min_words: int = Field(
        3,
        ge=1,
        description="a piece of the message with fewer words is not a request (the default pipeline sets 4: chosen "
        "leaving one catalog out on fourteen dev catalogs: docs/benchmarks.md, on multi_intent's request length)",
    )
    max_requests: int = Field(8, ge=2, description="at most this many requests are retrieved per message")
    and_max_words: int = Field(12, ge=0, description="a piece of at most this many words is also split at 'and'")
    lines: Literal["all", "asking"] = Field(
        "asking",
        description="'asking': after the first line, only lines that ask for something hold requests (chosen by "
        "5-fold CV on API-Bank dialogues, the only shared data with line breaks: every fold picked it); "
        "'all': every line",
    )
    preamble: Literal["request", "context"] = Field(
        "context",
        description="'context': a first sentence that describes the speaker (\"I'm a film critic and ...\", \"As a "
        "teacher, ...\") and does not ask outright (no '?', 'can you', 'please') is not a request; it stays in the "
        "whole message. Chosen on train splits: ToolBench R@5 52.5 -> 54.6 (every group up), Seal-Tools 89.3 -> "
        "89.4, MetaTool 78.9 -> 78.7 (1,500 sampled); 'request': every sentence can be one",
    )
    and_verbs: bool = Field(
        True,
        description="a piece longer than and_max_words is split at 'and' where an action verb follows ('the stock "
        "price of Microsoft and convert it to Indian Rupees'); verbs that ask for the same request's output "
        "(provide, give, tell, show) do not split. Chosen on train splits: ToolBench R@5 / Suff@5 55.8 / 40.0 -> "
        "56.1 / 40.4, Seal-Tools 89.3 / 72.1 -> 89.3 / 72.0, MetaTool (1,500 sampled) one query lower; NESTFUL "
        "(a CV set) 85.8 / 70.0 -> 86.6 / 71.3 (docs/benchmarks/default_pipeline.md)",
    )
    comma_verbs: bool = Field(
        False,
        description="with and_verbs: such a piece is also split at a comma where an action verb follows ('..., "
        "calculate the square of it, and create an invoice'). An option: off in the default "
        "(docs/benchmarks.md, 'Does the default transfer?')",
    )
    rrf_k: int = Field(1, ge=1, description="RRF constant when merging the whole message's and each request's ranking")
    whole_weight: float = Field(1.0, ge=0, description="weight of the whole message's ranking in the merge")
    pooled: bool = Field(
        False,
        description="search a multi-request message with the length-weighted mean of its requests' vectors "
        "instead of encoding it again: one encoding of the text instead of two (dense and hybrid first stages); "
        "faster, but 1.4 points lower Recall@5 on ToolBench train, so off by default",
    )
    named_tools: bool = Field(
        True,
        description="a request that names a catalog tool ('using the bitly tool', 'on Vimeo') puts that tool's "
        "APIs first in its ranking (see ToolNames). Chosen on train splits: ToolBench R@5 54.6 -> 55.8, Suff@5 "
        "37.8 -> 40.0, Seal-Tools and MetaTool unchanged; on ToolBench dev, measured after, it cost 0.6 R@5 (two "
        "queries: generic names such as 'Image Search' shared by four tools). Off in the default pipeline since "
        "the fourteenth dev catalog (issue 29's transfer rule: -0.7 R@5 on the PyPI MCP tasks, one task's "
        "'from the Wikipedia article' naming the wikipedia server)",
    )
    actions: bool = Field(
        True,
        description="a request's action verb picks among one thing's actions: within the top action_window of "
        'its ranking an API whose name states the request\'s action ("cancel my appointment": '
        "CancelRegistration) takes the place of the first one above it that states another action on the same "
        "thing (QueryRegistration). Chosen by 5-fold CV on API-Bank, NESTFUL and the bundled catalog with the "
        "train splits of ToolBench, Seal-Tools and MetaTool (every fold picked it)",
    )
    action_window: int = Field(
        20, ge=1, description="how deep in a request's ranking actions are matched (CV: 20 in four folds of five)"
    )
    action_compounds: bool = Field(
        True,
        description="with actions: an API whose name states no action but names more of the thing "
        "(AppointmentRegistration beside CancelRegistration) counts as another action on it, when both are of "
        "one tool (or neither has one) and none of its extra words begins two or more API names of the catalog "
        "(a verb: performDataAnalysis, PlaySong). No query of the ToolBench, Seal-Tools or MetaTool train "
        "splits moved; API-Bank (CV set) Suff@5 83.7 -> 85.2, 5 queries better, 1 worse "
        "(docs/benchmarks/default_pipeline.md)",
    )
    requests_by: Literal["first_stage", "lexical"] = Field(
        "first_stage",
        description="how the requests are retrieved: 'first_stage' (the engine's own), 'lexical' (a hybrid first "
        "stage's BM25 alone: the requests cost no encoding, the whole message is still searched by both)",
    )


class MultiIntentStage(Stage):
    """Retrieves each request of a multi-request message and merges the rankings (see the module text).

    The trace lists the requests found; ``stage_scores["multi_intent"]`` is the merged RRF score.
    """

    name = "multi_intent"
    score_scale = (
        "reciprocal-rank fusion of the whole message's ranking and each request's: sum of weight / (rrf_k + rank); "
        "a message with one request keeps the first stage's score"
    )

    def __init__(self, config: MultiIntentConfig | None = None) -> None:
        self.config = config or MultiIntentConfig()
        self._names: ToolNames | None = None
        self._names_of: Catalog | None = None
        self._verbs: tuple[Catalog, frozenset[str]] | None = None

    def on_index(self, ctx: StageContext) -> None:
        if self.config.named_tools:  # a new object: searches still running keep the old one
            self._names, self._names_of = ToolNames(ctx.catalog), ctx.catalog
        if self.config.actions and self.config.action_compounds:
            self._verbs = (ctx.catalog, _verbs_of(ctx.catalog))

    def _catalog_verbs(self, ctx: StageContext) -> frozenset[str] | None:
        if not (self.config.actions and self.config.action_compounds):
            return None
        verbs = self._verbs  # one read: on_index may replace it meanwhile
        if verbs is not None and verbs[0] is ctx.catalog:
            return verbs[1]
        return _verbs_of(ctx.catalog)  # not indexed through the engine (a bare stage; as _tool_names)

    def _tool_names(self, ctx: StageContext) -> ToolNames | None:
        if not self.config.named_tools:
            return None
        names, catalog = self._names, ctx.catalog
        if names is None or self._names_of is not catalog:  # not indexed through the engine (a bare stage)
            names = ToolNames(catalog)
        return names

    def _requests(self, query: str) -> list[str]:
        c = self.config
        return split_requests(
            query,
            min_words=c.min_words,
            max_requests=c.max_requests,
            and_max_words=c.and_max_words,
            lines=c.lines,
            preamble=c.preamble,
            and_verbs=c.and_verbs,
            comma_verbs=c.comma_verbs,
        )

    def _by_action(
        self, request: str, ranking: list[ScoredTool], trace: dict[str, Any], ctx: StageContext
    ) -> list[ScoredTool]:
        action = request_action(request) if self.config.actions else None
        if action is None:
            return ranking
        ranked = by_action(ranking, action, self.config.action_window, self._catalog_verbs(ctx))
        if ranked is not ranking:  # the trace says which request's verb moved an API
            trace.setdefault("actions", {})[request] = action
        return ranked

    def query_parts(self, query: str) -> QueryParts | None:
        requests = self._requests(query)
        c = self.config
        if len(requests) < 2:
            return None
        return QueryParts(tuple(requests), pooled=c.pooled, lexical=c.requests_by == "lexical")

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        c = self.config
        requests = self._requests(query)
        trace["requests"] = requests
        if not candidates:
            return candidates
        names = self._tool_names(ctx)
        if len(requests) < 2:
            named = names.mentioned(query) if names is not None else frozenset()
            ranked = self._by_action(query, candidates, trace, ctx)
            if not named:
                return candidates if ranked is candidates else renumber(ranked)
            trace["named_tools"] = sorted(named)
            return renumber(_named_first(ranked, named))
        depth = max(len(candidates), ctx.depth)
        rankings: list[tuple[list[ScoredTool], float]] = [(candidates, c.whole_weight)]
        all_named: set[str] = set()
        for request, ranking in zip(requests, ctx.retrieve(requests, depth)):
            named = names.mentioned(request) if names is not None else frozenset()
            ranking = self._by_action(request, ranking, trace, ctx)
            if named:
                ranking = _named_first(ranking, named)
                all_named |= named
            rankings.append((ranking, 1.0))
        if all_named:
            trace["named_tools"] = sorted(all_named)
        scores: dict[str, float] = {}
        items: dict[str, ScoredTool] = {}
        for ranking, weight in rankings:
            for rank, st in enumerate(ranking, start=1):
                scores[st.id] = scores.get(st.id, 0.0) + weight / (c.rrf_k + rank)
                items.setdefault(st.id, st)
        order = sorted(scores, key=lambda t: -scores[t])[:depth]  # stable: ties keep first-seen order
        return [items[t].with_stage(self.name, scores[t], rank=i) for i, t in enumerate(order, start=1)]


STAGE_TYPE = StageType(MultiIntentConfig, lambda cfg, ctx, path: MultiIntentStage(cfg))
