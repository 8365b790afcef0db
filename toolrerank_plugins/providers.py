"""Provider-native deferred tool search, answered by the engine: OpenAI Responses ``tool_search`` run by the
client, and Anthropic's client-side tool search with ``tool_reference`` blocks; and back, the providers' tool
definitions into a catalog.

Both providers let a request carry many tools marked ``defer_loading: true`` whose schemas stay out of the
prompt until a search loads them, and let that search run on the client. :class:`DeferredToolSearch` builds the
request's ``tools`` array (the search tool first, pinned tools loaded, the rest deferred, always in the same
order so the prompt cache keeps the tool block) and answers the model's search calls with the engine (pins and
fail-open are :class:`~toolrerank_plugins.agents.BaseToolSelector`'s). Everything is plain JSON dicts of the
documented shapes; no provider SDK is imported (the tests drive both official SDKs against these payloads).

The shapes, as documented (read for this module; field names as the APIs define them):

* OpenAI Responses — guide "Tool search" (https://developers.openai.com/api/docs/guides/tools-tool-search):
  add ``{"type": "tool_search"}`` to ``tools`` and mark functions ``defer_loading: true``. The SDK's generated
  types (``openai.types.responses``: ``ToolSearchToolParam`` — ``type``, ``execution: "server" | "client"``,
  ``description``, ``parameters`` "for a client-executed tool search tool"; ``ResponseToolSearchCall`` — ``id``,
  ``call_id``, ``execution``, ``arguments``, ``status``, ``type: "tool_search_call"``;
  ``ResponseToolSearchOutputItemParam`` — ``type: "tool_search_output"``, ``call_id``, ``execution``,
  ``status``, ``tools``: "the loaded tool definitions"; ``FunctionToolParam`` — ``type: "function"``, ``name``,
  ``description``, ``parameters``, ``strict``, ``defer_loading``; ``NamespaceToolParam`` — ``type:
  "namespace"``, ``name``, ``description``, ``tools``).
* Anthropic Messages — "Tool search tool" (https://platform.claude.com/docs/en/agents-and-tools/tool-use/
  tool-search-tool): besides the server-side variants, "you can also implement client-side tool search by
  returning ``tool_reference`` blocks from your own search implementation". The SDK's types
  (``anthropic.types``): ``ToolParam`` — ``name``, ``description``, ``input_schema``, ``defer_loading`` ("If
  true, tool will not be included in initial system prompt. Only loaded when returned via tool_reference from
  tool search."); ``ToolResultBlockParam`` — ``type: "tool_result"``, ``tool_use_id``, ``content`` (which may
  hold ``ToolReferenceBlockParam`` — ``type: "tool_reference"``, ``tool_name``), ``is_error``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toolrerank_plugins.agents import BaseToolSelector, Ranking
from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec, thaw

logger = logging.getLogger(__name__)

#: Tool names both providers accept (OpenAI functions: ``^[a-zA-Z0-9_-]{1,64}$``; Anthropic alike).
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")

#: The search tool's input: one query in plain words (a ``queries`` list, as some clients send, is accepted).
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what the tool should do, in plain words"}},
    "required": ["query"],
}
DEFAULT_SEARCH_DESCRIPTION = (
    "Search the deferred tools for the task at hand, described in plain words; the best matches are loaded "
    "and can be called next."
)


def _plain(value: Any) -> Any:
    """A provider SDK object (pydantic) as its JSON dict; anything else as it is."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, Mapping):
        return dump(mode="json", exclude_none=True)
    return value


def provider_tool_names(catalog: Catalog) -> dict[str, str]:
    """A provider tool name per API id: the API's name where it is unique and valid, else its id with every
    other character as ``_`` (``git/git_log`` -> ``git__git_log``), cut to 64; deterministic, no duplicates.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> provider_tool_names(tiny_catalog())["Auth/Keyring/login"]
        'login'
    """
    counts: dict[str, int] = {}
    for spec in catalog:
        counts[spec.name] = counts.get(spec.name, 0) + 1
    names: dict[str, str] = {}
    taken: set[str] = set()
    for spec in catalog:
        name = spec.name if counts[spec.name] == 1 and _NAME_OK.match(spec.name) else None
        if name is None or name in taken:
            base = _NAME_BAD_CHARS.sub("_", spec.id.replace("/", "__"))[:60] or "tool"
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base[:56]}_{n}"
        taken.add(name)
        names[spec.id] = name
    return names


# -- provider tool definitions -> catalog ------------------------------------------------------------------
def from_openai_responses_tools(
    tools: Iterable[Any], *, category: str | None = None, source: str = "<openai responses tools>"
) -> Catalog:
    """A catalog from an OpenAI Responses ``tools`` array: every function tool one API (id = its name), a
    namespace's functions with the namespace as their parent tool (id ``<namespace>/<name>``); hosted tools
    (``tool_search``, ``web_search``, ``mcp`` ...) are left out. ``defer_loading`` and ``strict`` go into the
    metadata. Chat-completions entries (``{"type": "function", "function": {...}}``) are read too.

    Example:
        >>> cat = from_openai_responses_tools([{"type": "tool_search"},
        ...     {"type": "function", "name": "get_weather", "description": "Weather for a city",
        ...      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "defer_loading": True},
        ...     {"type": "namespace", "name": "crm", "description": "Customers",
        ...      "tools": [{"type": "function", "name": "find_customer"}]}])
        >>> cat.ids, cat["get_weather"].metadata["defer_loading"], cat["crm/find_customer"].tool
        (['get_weather', 'crm/find_customer'], True, 'crm')

    Raises:
        CatalogError: ``tools`` is not a list, or a function has no name (the message names its position).
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise CatalogError(f"{source}: expected the list of a request's 'tools', got {type(tools).__name__}")
    specs: list[ToolSpec] = []
    skipped: list[str] = []

    def add(fn: Mapping[str, Any], where: str, namespace: Mapping[str, Any] | None) -> None:
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: function has no 'name'")
        meta: dict[str, Any] = {"format": "openai"}
        for key in ("defer_loading", "strict"):
            if fn.get(key) is not None:
                meta[key] = fn[key]
        ns = namespace.get("name") if namespace is not None else None
        if namespace is not None and namespace.get("description"):
            meta["namespace_description"] = namespace["description"]
        specs.append(
            build_spec(
                where,
                id=name if ns is None else f"{ns}/{name}",
                name=name,
                description=fn.get("description") or "",
                tool=ns if isinstance(ns, str) else None,
                category=category,
                parameters=fn.get("parameters") or {"type": "object", "properties": {}},
                returns=fn.get("output_schema"),
                metadata=meta,
            )
        )

    for i, raw in enumerate(tools):
        entry = _plain(raw)
        where = f"{source}: tool {i + 1}"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{where}: expected a mapping, got {type(entry).__name__}")
        kind = entry.get("type", "function")
        if kind == "function":
            fn = entry.get("function", entry)
            add(fn if isinstance(fn, Mapping) else {}, where, None)
        elif kind == "namespace":
            for j, member in enumerate(entry.get("tools") or []):
                member = _plain(member)
                if isinstance(member, Mapping) and member.get("type", "function") == "function":
                    add(member, f"{where}, function {j + 1}", entry)
        else:
            skipped.append(str(kind))
    if skipped:
        logger.info("%s: hosted tools left out of the catalog: %s", source, ", ".join(sorted(set(skipped))))
    return Catalog(specs, source=source)


def from_anthropic_tools(
    tools: Iterable[Any], *, category: str | None = None, source: str = "<anthropic tools>"
) -> Catalog:
    """A catalog from an Anthropic Messages ``tools`` array: every custom tool (no ``type``, or ``"custom"``)
    one API (id = its name, ``input_schema`` as parameters); Anthropic's own tools (``web_search_...``,
    ``tool_search_tool_...``, ``bash_...``) are left out. ``defer_loading`` goes into the metadata.

    Example:
        >>> cat = from_anthropic_tools([{"name": "get_weather", "description": "Weather for a city",
        ...     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        ...     "defer_loading": True}, {"type": "web_search_20250305", "name": "web_search"}])
        >>> cat.ids, list(cat["get_weather"].parameters["properties"])
        (['get_weather'], ['city'])

    Raises:
        CatalogError: ``tools`` is not a list, or a custom tool has no name or schema.
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise CatalogError(f"{source}: expected the list of a request's 'tools', got {type(tools).__name__}")
    specs: list[ToolSpec] = []
    for i, raw in enumerate(tools):
        entry = _plain(raw)
        where = f"{source}: tool {i + 1}"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{where}: expected a mapping, got {type(entry).__name__}")
        if entry.get("type") not in (None, "custom"):
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: tool has no 'name'")
        if not isinstance(entry.get("input_schema"), Mapping):
            raise CatalogError(f"{where} ({name!r}): tool has no 'input_schema'")
        meta: dict[str, Any] = {"format": "anthropic"}
        if entry.get("defer_loading") is not None:
            meta["defer_loading"] = entry["defer_loading"]
        specs.append(
            build_spec(
                where,
                id=name,
                name=name,
                description=entry.get("description") or "",
                tool=None,
                category=category,
                parameters=entry["input_schema"],
                metadata=meta,
            )
        )
    return Catalog(specs, source=source)


# -- the engine as the provider's search ---------------------------------------------------------------------
def search_query(arguments: Any) -> str:
    """The query of a search call's arguments: ``{"query": "..."}`` (this module's schema) or ``{"queries":
    [...]}`` (joined); a JSON string of either is read too.

    Example:
        >>> search_query({"query": "weather in Oslo"}), search_query('{"queries": ["weather", "Oslo"]}')
        ('weather in Oslo', 'weather Oslo')
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    if isinstance(arguments, Mapping):
        query = arguments.get("query")
        if isinstance(query, str):
            return query
        queries = arguments.get("queries")
        if isinstance(queries, list):
            return " ".join(q for q in queries if isinstance(q, str))
    return ""


class DeferredToolSearch:
    """The engine as a provider's client-side tool search, for the OpenAI Responses API and Anthropic Messages.

    The request's ``tools`` (:meth:`openai_tools`, :meth:`anthropic_tools`) are the search tool, then the pinned
    tools (loaded), then every other API with ``defer_loading: true``, in catalog order: the same array on every
    turn, so the provider's prompt cache keeps it (the provider appends the tools a search loads at the end of
    the context). A search call of the model is answered with the engine's best ``k`` tools
    (:meth:`openai_tool_search_output`, :meth:`anthropic_tool_result`); when the search fails it offers the
    pinned tools (``fail_open``), or without pins the catalog's first ones.

    Args:
        engine: an engine over the tools' catalog.
        k: tools one search loads.
        always_include: API ids or tool names always loaded (never deferred).
        always_include_servers: parent tools (an MCP server, an OpenAI namespace) whose APIs are always loaded.
        fail_open: a failing search loads the pinned tools instead of raising.
        search_tool_name: the search tool's name (Anthropic: a custom tool of that name).
        search_description: what the model is told the search tool does.

    Example:
        >>> from toolrerank_plugins.engine import EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> search = DeferredToolSearch(Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")), k=2,
        ...                             always_include=["login"])
        >>> [(t.get("name", t["type"]), t.get("defer_loading", False)) for t in search.openai_tools()][:3]
        [('tool_search', False), ('login', False), ('update_email', True)]
        >>> call = {"type": "tool_search_call", "id": "ts_1", "call_id": "call_1", "execution": "client",
        ...         "status": "completed", "arguments": {"query": "send an email"}}
        >>> output = search.openai_tool_search_output(call)
        >>> output["type"], output["call_id"], [t["name"] for t in output["tools"]]
        ('tool_search_output', 'call_1', ['send_email', 'delete_email'])
        >>> use = {"type": "tool_use", "id": "toolu_1", "name": "search_tools", "input": {"query": "weather"}}
        >>> result = search.anthropic_tool_result(use)
        >>> result["type"], result["tool_use_id"], result["content"][0]
        ('tool_result', 'toolu_1', {'type': 'tool_reference', 'tool_name': 'current_weather'})
    """

    def __init__(
        self,
        engine: Engine,
        *,
        k: int = 5,
        always_include: Iterable[str] = (),
        always_include_servers: Iterable[str] = (),
        fail_open: bool = True,
        search_tool_name: str = "search_tools",
        search_description: str = DEFAULT_SEARCH_DESCRIPTION,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.engine = engine
        self.k = k
        self.search_tool_name = search_tool_name
        self.search_description = search_description
        self.names = provider_tool_names(engine.catalog)
        self.ids = {name: tid for tid, name in self.names.items()}
        if search_tool_name in self.ids:
            raise ValueError(f"search_tool_name={search_tool_name!r} is the name of a catalog tool; choose another")
        pins = [self.names.get(p, p) for p in always_include]  # an API id or a provider name
        servers = list(always_include_servers)
        pinned = set(pins) | {self.names[s.id] for s in engine.catalog if s.tool in set(servers)}
        self.selector: BaseToolSelector[str] = BaseToolSelector(
            engine,
            dict(self.names),
            name=str,
            max_tools=max(k, len(pinned), 1),
            always_include=pins,
            always_include_servers=servers,
            fail_open=fail_open,
            builder="DeferredToolSearch",
        )

    @property
    def pinned(self) -> list[str]:
        """The provider names of the tools always loaded."""
        return [str(t) for t in self.selector.pinned]

    def search(self, query: str, k: int | None = None) -> tuple[list[str], Ranking]:
        """The provider names of the best ``k`` tools for ``query`` (pinned ones, already loaded, left out)
        and the ranking; a failed search (fail-open) gives the pinned tools."""
        k = min(k or self.k, self.selector.max_tools)
        ranking = self.selector.rank(query, k, exclude=self.pinned)  # the engine searches past the pinned tools
        found = [self.names[st.tool.id] for st in ranking.results][:k]
        if not found and ranking.reason is not None:
            found = self.pinned
        return found, ranking

    # -- OpenAI Responses --------------------------------------------------------------------------------
    def openai_function(self, name: str, *, defer: bool = False) -> dict[str, Any]:
        """One API as a Responses function tool (``FunctionToolParam``)."""
        spec = self.engine.catalog[self.ids[name]]
        tool: dict[str, Any] = {
            "type": "function",
            "name": name,
            "description": spec.description,
            "parameters": thaw(spec.parameters),
            "strict": False,  # catalogs' schemas are rarely strict-mode schemas (every field required, no extras)
        }
        if defer:
            tool["defer_loading"] = True
        return tool

    def openai_tools(self) -> list[dict[str, Any]]:
        """The request's ``tools``: ``tool_search`` run by the client, the pinned functions, then every other
        function with ``defer_loading: true`` — in catalog order, the same on every turn."""
        pinned = set(self.pinned)
        search = {
            "type": "tool_search",
            "execution": "client",
            "description": self.search_description,
            "parameters": SEARCH_PARAMETERS,
        }
        ordered = [self.names[s.id] for s in self.engine.catalog]
        return [
            search,
            *(self.openai_function(n) for n in self.pinned),
            *(self.openai_function(n, defer=True) for n in ordered if n not in pinned),
        ]

    def openai_search_calls(self, response: Any) -> list[dict[str, Any]]:
        """The client-executed ``tool_search_call`` items of a response (an SDK ``Response`` or its JSON)."""
        data = _plain(response)
        output = data.get("output", []) if isinstance(data, Mapping) else data
        return [
            dict(item)
            for item in (_plain(i) for i in output or [])
            if isinstance(item, Mapping)
            and item.get("type") == "tool_search_call"
            and item.get("execution") == "client"
        ]

    def openai_tool_search_output(self, call: Any) -> dict[str, Any]:
        """The ``tool_search_output`` input item that answers one ``tool_search_call`` (an SDK object or its
        JSON): the found tools' function definitions (``defer_loading`` kept, as they were declared)."""
        item = _plain(call)
        if not isinstance(item, Mapping) or item.get("type") != "tool_search_call":
            raise ValueError(f"expected a tool_search_call output item, got {item!r:.200}")
        found, _ = self.search(search_query(item.get("arguments")))
        pinned = set(self.pinned)
        return {
            "type": "tool_search_output",
            "call_id": item.get("call_id") or item.get("id"),
            "execution": "client",
            "status": "completed",
            "tools": [self.openai_function(n, defer=n not in pinned) for n in found],
        }

    # -- Anthropic Messages --------------------------------------------------------------------------------
    def anthropic_tool(self, name: str, *, defer: bool = False) -> dict[str, Any]:
        """One API as a Messages custom tool (``ToolParam``)."""
        spec = self.engine.catalog[self.ids[name]]
        tool: dict[str, Any] = {"name": name, "description": spec.description, "input_schema": thaw(spec.parameters)}
        if defer:
            tool["defer_loading"] = True
        return tool

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The request's ``tools``: the search tool, the pinned tools, then every other tool with
        ``defer_loading: true`` — in catalog order, the same on every turn."""
        pinned = set(self.pinned)
        search = {
            "name": self.search_tool_name,
            "description": self.search_description,
            "input_schema": SEARCH_PARAMETERS,
        }
        ordered = [self.names[s.id] for s in self.engine.catalog]
        return [
            search,
            *(self.anthropic_tool(n) for n in self.pinned),
            *(self.anthropic_tool(n, defer=True) for n in ordered if n not in pinned),
        ]

    def anthropic_tool_result(self, tool_use: Any) -> dict[str, Any]:
        """The ``tool_result`` block answering one ``tool_use`` of the search tool (an SDK ``ToolUseBlock`` or
        its JSON): a ``tool_reference`` block per tool found, or a text block when nothing is found."""
        block = _plain(tool_use)
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            raise ValueError(f"expected a tool_use block, got {block!r:.200}")
        if block.get("name") != self.search_tool_name:
            raise ValueError(f"tool_use {block.get('name')!r} is not the search tool {self.search_tool_name!r}")
        found, ranking = self.search(search_query(block.get("input")))
        content: list[dict[str, Any]] = [{"type": "tool_reference", "tool_name": n} for n in found]
        if not content:
            why = f" ({ranking.reason})" if ranking.reason else ""
            content = [{"type": "text", "text": f"No tool matches this search{why}."}]
        return {"type": "tool_result", "tool_use_id": block.get("id"), "content": content}

    def anthropic_tool_results(self, message: Any) -> list[dict[str, Any]]:
        """A ``tool_result`` for every search ``tool_use`` in a response message (an SDK ``Message`` or its
        JSON), in order: the content of the next user message (with the results of any other tool calls)."""
        data = _plain(message)
        content: Sequence[Any] = data.get("content", []) if isinstance(data, Mapping) else []
        return [
            self.anthropic_tool_result(b)
            for b in (_plain(c) for c in content)
            if isinstance(b, Mapping) and b.get("type") == "tool_use" and b.get("name") == self.search_tool_name
        ]

    def __repr__(self) -> str:
        return f"DeferredToolSearch({len(self.names)} tools, k={self.k}, pinned={len(self.pinned)})"
