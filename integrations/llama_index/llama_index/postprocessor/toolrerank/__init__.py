"""Rerank any retriever's nodes with toolrerank-plugins stages."""

from llama_index.postprocessor.toolrerank.base import ToolRerankPostprocessor

__all__ = ["ToolRerankPostprocessor"]
