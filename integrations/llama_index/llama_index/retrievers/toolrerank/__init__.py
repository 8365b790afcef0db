"""LlamaIndex integration of toolrerank-plugins: tool retriever, agent tool retriever, LLM wrapper.

The node postprocessor lives in :mod:`llama_index.postprocessor.toolrerank`.
"""

from llama_index.retrievers.toolrerank.base import ToolRerankRetriever
from llama_index.retrievers.toolrerank.llms import LlamaIndexLLM
from llama_index.retrievers.toolrerank.tools import ToolRerankToolRetriever, use_agent_llm

__all__ = ["LlamaIndexLLM", "ToolRerankRetriever", "ToolRerankToolRetriever", "use_agent_llm"]
