"""Conversions between toolrerank-plugins records and LlamaIndex objects (the only place they happen)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.schema import BaseNode, NodeWithScore, TextNode
from llama_index.core.tools import BaseTool, FunctionTool

from toolrerank_plugins.agents import Ranking
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.interop import (
    CATEGORY,
    NAME,
    RANK,
    SCORE,
    SELECTION_REASON,
    STAGE_SCORES,
    TOOL,
    TOOL_ID,
    read_tool_schema,
    result_metadata,
)
from toolrerank_plugins.llm.base import Message
from toolrerank_plugins.llm.wrapper import convert_messages
from toolrerank_plugins.records import ScoredTool, ToolSpec

# Ranking bookkeeping stays out of the text LLMs and embedders see.
_HIDDEN = [SCORE, RANK, STAGE_SCORES, SELECTION_REASON]


def scored_to_node(
    st: ScoredTool, render: Callable[[ToolSpec], str], extra: Mapping[str, Any] | None = None
) -> NodeWithScore:
    """A retrieved tool as a node (id = tool id, text = rendered tool) with the fixed metadata keys (and
    ``extra`` ones)."""
    node = TextNode(
        id_=st.tool.id,
        text=render(st.tool),
        metadata={**result_metadata(st), **(extra or {})},
        excluded_llm_metadata_keys=list(_HIDDEN),
        excluded_embed_metadata_keys=list(_HIDDEN),
    )
    return NodeWithScore(node=node, score=st.score)


def selection_nodes(ranking: Ranking, render: Callable[[ToolSpec], str]) -> list[NodeWithScore]:
    """An agent's tool selection as nodes; when a fallback filled it, each node's metadata says why
    (``selection_reason``)."""
    extra = {SELECTION_REASON: ranking.reason} if ranking.reason is not None else None
    return [scored_to_node(st, render, extra) for st in ranking.results]


def node_to_spec(node: BaseNode, catalog: Catalog) -> ToolSpec:
    """The tool a node stands for: the catalog's entry for ``metadata["tool_id"]`` when known, else a spec
    built from the node's text (id: ``tool_id`` or the node id)."""
    meta = node.metadata or {}
    tool_id = meta.get(TOOL_ID)
    if isinstance(tool_id, str):
        known = catalog.get(tool_id)
        if known is not None:
            return known
    tid = tool_id if isinstance(tool_id, str) and tool_id else node.node_id
    name = meta.get(NAME)
    return ToolSpec(
        id=tid,
        name=name if isinstance(name, str) and name else tid,
        description=node.get_content(),
        tool=meta.get(TOOL) if isinstance(meta.get(TOOL), str) else None,
        category=meta.get(CATEGORY) if isinstance(meta.get(CATEGORY), str) else None,
    )


def rescored_node(nws: NodeWithScore, st: ScoredTool) -> NodeWithScore:
    """A copy of the node with the ranking written into a copy of its metadata (the input is not touched)."""
    node = nws.node
    meta = {**(node.metadata or {}), **result_metadata(st)}
    copy = node.model_copy(
        update={
            "metadata": meta,
            "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, *_HIDDEN],
            "excluded_embed_metadata_keys": [*node.excluded_embed_metadata_keys, *_HIDDEN],
        }
    )
    return NodeWithScore(node=copy, score=st.score)


def tool_to_spec(tool: BaseTool) -> ToolSpec:
    """A LlamaIndex tool as a ``ToolSpec`` (id = tool name).

    Raises:
        CatalogError: the tool's ``fn_schema`` gives no JSON Schema (not a pydantic model, or a field pydantic
            cannot describe).
    """
    meta = tool.metadata
    parameters = read_tool_schema(meta.name, meta.get_parameters_dict)
    return ToolSpec(
        id=meta.name or "",
        name=meta.name or "",
        description=meta.description or "",
        parameters=parameters,
        metadata={"format": "llama_index"},
    )


def spec_to_tool(spec: ToolSpec, func: Callable[..., Any], name: str) -> BaseTool:
    """A ``FunctionTool`` calling ``func`` (its argument schema comes from ``func``'s signature)."""
    return FunctionTool.from_defaults(fn=func, name=name, description=spec.description or spec.name)


_MESSAGES: Mapping[str, Callable[[str], ChatMessage]] = {
    "system": lambda c: ChatMessage(role=MessageRole.SYSTEM, content=c),
    "user": lambda c: ChatMessage(role=MessageRole.USER, content=c),
    "assistant": lambda c: ChatMessage(role=MessageRole.ASSISTANT, content=c),
}


def to_chat_messages(prompt: str | Sequence[Message]) -> list[ChatMessage]:
    """Core LLM-port input as LlamaIndex chat messages."""
    return convert_messages(prompt, _MESSAGES)


def response_text(response: ChatResponse) -> str:
    return response.message.content or ""
