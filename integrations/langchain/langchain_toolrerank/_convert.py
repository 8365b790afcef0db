"""Conversions between toolrerank-plugins records and LangChain objects (the only place they happen)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages import ToolCall as LCToolCall
from langchain_core.messages.tool import tool_call
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolrerank_plugins.agents import ToolCall, ToolOutcome
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.interop import (
    CATEGORY,
    NAME,
    TOOL,
    TOOL_ID,
    read_tool_schema,
    result_metadata,
)
from toolrerank_plugins.llm.base import Message
from toolrerank_plugins.llm.wrapper import convert_messages
from toolrerank_plugins.records import ScoredTool, ToolSpec, check_text, stable_id, thaw
from toolrerank_plugins.selection import Turn


def scored_to_document(st: ScoredTool, render: Callable[[ToolSpec], str]) -> Document:
    """A retrieved tool as a ``Document``: the rendered tool text plus the fixed metadata keys."""
    return Document(page_content=render(st.tool), metadata=result_metadata(st), id=st.tool.id)


def document_to_spec(doc: Document, catalog: Catalog) -> ToolSpec:
    """The tool a document stands for: the catalog's entry for ``metadata["tool_id"]`` when known, else a
    spec built from the document text (id: ``tool_id`` or a sha256 of the text)."""
    meta = doc.metadata or {}
    tool_id = meta.get(TOOL_ID)
    if isinstance(tool_id, str):
        known = catalog.get(tool_id)
        if known is not None:
            return known
    text = doc.page_content
    check_text(text, "document page_content")  # CatalogError, not the UnicodeEncodeError of hashing it
    tid = tool_id if isinstance(tool_id, str) and tool_id else stable_id({"page_content": text})
    name = meta.get(NAME)
    return ToolSpec(
        id=tid,
        name=name if isinstance(name, str) and name else tid,
        description=text,
        tool=meta.get(TOOL) if isinstance(meta.get(TOOL), str) else None,
        category=meta.get(CATEGORY) if isinstance(meta.get(CATEGORY), str) else None,
    )


def rescored_document(doc: Document, st: ScoredTool) -> Document:
    """A copy of ``doc`` with the ranking written into a copy of its metadata (the input is not touched)."""
    meta = dict(doc.metadata or {})
    meta.update(result_metadata(st))
    return Document(page_content=doc.page_content, metadata=meta, id=doc.id)


def tool_to_spec(tool: BaseTool) -> ToolSpec:
    """A LangChain tool as a ``ToolSpec`` (id = tool name; ``tool.metadata`` may give ``tool``/``category``).

    Raises:
        CatalogError: LangChain cannot turn the tool's argument schema into JSON Schema (a ``$ref`` that
            points nowhere, a schema nested past Python's recursion limit, a field pydantic cannot describe).
    """
    fn = read_tool_schema(tool.name, lambda: convert_to_openai_tool(tool)["function"])
    meta = tool.metadata or {}
    return ToolSpec(
        id=tool.name,
        name=tool.name,
        description=fn.get("description") or "",
        tool=meta.get(TOOL) if isinstance(meta.get(TOOL), str) else None,
        category=meta.get(CATEGORY) if isinstance(meta.get(CATEGORY), str) else None,
        parameters=fn.get("parameters") or {"type": "object", "properties": {}},
        metadata={"format": "langchain"},
    )


def spec_to_tool(spec: ToolSpec, func: Callable[..., Any], name: str) -> BaseTool:
    """A ``StructuredTool`` that calls ``func`` and shows the model the spec's JSON Schema."""
    return StructuredTool.from_function(
        func=func,
        name=name,
        description=spec.description or spec.name,
        args_schema=thaw(spec.parameters),
        metadata={TOOL_ID: spec.id, TOOL: spec.tool, CATEGORY: spec.category},
    )


_MESSAGES: Mapping[str, Callable[[str], BaseMessage]] = {
    "system": lambda c: SystemMessage(content=c),
    "user": lambda c: HumanMessage(content=c),
    "assistant": lambda c: AIMessage(content=c),
}


def to_chat_messages(prompt: str | Sequence[Message]) -> list[BaseMessage]:
    """Core LLM-port input (a prompt or role/content dicts) as LangChain messages."""
    return convert_messages(prompt, _MESSAGES)


def to_tool_call(call: LCToolCall) -> ToolCall:
    return ToolCall(call["name"], call["args"], call["id"])


def from_tool_call(call: ToolCall) -> LCToolCall:
    return tool_call(name=call.name, args=dict(call.args), id=call.id)


def tool_outcome(message: ToolMessage) -> ToolOutcome[BaseMessage]:
    """A tool's ``ToolMessage`` as the core's outcome (failed = ``status == "error"``)."""
    return ToolOutcome(message, failed=message.status == "error", artifact=message.artifact)


def message_text(message: BaseMessage) -> str:
    """Plain text of a model reply (text content blocks joined)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def to_turns(messages: Sequence[BaseMessage]) -> list[Turn]:
    """A conversation as the core's :class:`~toolrerank_plugins.selection.Turn` records (system messages left
    out; a tool result's list-of-names artifact, as a tool-search tool returns, becomes ``found``)."""
    turns: list[Turn] = []
    for m in messages:
        if isinstance(m, HumanMessage):
            turns.append(Turn("user", message_text(m)))
        elif isinstance(m, AIMessage):
            turns.append(Turn("assistant", message_text(m)))
        elif isinstance(m, ToolMessage):
            art = m.artifact
            found = tuple(art) if isinstance(art, list) and all(isinstance(a, str) for a in art) else ()
            turns.append(Turn("tool", message_text(m), tool_name=m.name, found=found))
    return turns


def tool_name(tool: Any) -> str | None:
    """A ``BaseTool``'s name; ``None`` for anything else (a provider tool given as a dict)."""
    return tool.name if isinstance(tool, BaseTool) else None
