"""Learning from the agent's own usage: a usage log, an opt-in recorder, and a usage memory stage.

What every deployed agent has is its own history: which requests it received and which tools then served
them. This module turns that history into four things (``docs/usage.md``):

1. **seen tools** for ToolRerank's adaptive truncation (the catalog's ``seen`` flags);
2. **a usage memory**: past requests similar to a new one (dense + lexical similarity) vote for the tools
   that served them; the ``usage_memory`` stage fuses the votes with the ranking it receives, as far as such
   votes were right on the log itself (leave-one-out, :class:`Calibration`), so an empty
   or irrelevant memory changes nothing;
3. **co-usage edges**: tools used together for one request, repeatedly, become weighted catalog edges
   (mined with :func:`~toolrerank_plugins.graph.traces.mine_trace_edges`) that TGR's expansion follows;
4. **training data**: :func:`records_to_queries` turns a log into the labelled queries that
   ``toolrerank train`` reads.

The modules, one per concern (every public name is importable from this package too):

- ``records``: :class:`UsageRecord`, one logged request (frozen). A log is JSONL compatible with
  ``queries.jsonl`` (``query``, ``relevant``, ``calls``; plus ``success``, ``failed``, ``ts``), so a
  benchmark's queries file is a usage log and a usage log can be evaluated like a benchmark;
  :func:`records_to_queries` (training data).
- ``log``: :func:`read_usage_log` / :func:`write_usage_log`; :class:`UsageRecorder` (append-only, thread- and
  process-safe, :meth:`UsageRecorder.forget` rewrites the file atomically). Nothing records unless you
  create a recorder.
- ``memory``: :class:`UsageMemory`, the past requests (vectors from the engine's embedder, a lexical index),
  the tools that served each, tool use counts, co-usage counts and seen tools; immutable (``added`` returns a
  new one), saved as JSON + NPY.
- ``calibration``: :class:`Calibration`, how far the memory's votes may move a tool, measured on the log.
- ``edges``: the co-usage edges the catalog learns (``USAGE_EDGE_ORIGIN``).
- ``config`` and ``stage``: :class:`UsageMemoryConfig` and :class:`UsageMemoryStage` (stage type
  ``usage_memory``): the memory as a pipeline stage. ``Engine.learn`` adds one when the pipeline has none.
- ``evaluation``: :func:`memorised_split` (evaluation with a history).

Example:
    >>> from toolrerank_plugins import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    >>> report = engine.learn([UsageRecord("mail my landlord about the rent", relevant=("Mail/PostBox/send_email",))])
    >>> report["learned"], report["memory_size"]
    (1, 1)
    >>> engine.search("mail my landlord about the rent", top_k=1)[0].id
    'Mail/PostBox/send_email'
"""

from __future__ import annotations

# The star-import list (__all__) is the one of the module this package replaced; the names imported but not
# listed there (file names, calibration bins, the stage type, memorised_split) stay importable as before.
from toolrerank_plugins.usage.calibration import N_FEATURES, RANK_BINS, VOTE_BINS, Calibration  # noqa: F401
from toolrerank_plugins.usage.config import UsageMemoryConfig
from toolrerank_plugins.usage.edges import USAGE_EDGE_ORIGIN
from toolrerank_plugins.usage.evaluation import memorised_split  # noqa: F401
from toolrerank_plugins.usage.log import UsageLog, UsageRecorder, read_usage_log, write_usage_log
from toolrerank_plugins.usage.memory import MEMORY_FILE, MEMORY_FORMAT, VECTORS_FILE, UsageMemory  # noqa: F401
from toolrerank_plugins.usage.records import UsageLogError, UsageRecord, as_usage_records, records_to_queries
from toolrerank_plugins.usage.stage import CALIBRATION_FILE, STAGE_TYPE, UsageMemoryStage  # noqa: F401

__all__ = [
    "USAGE_EDGE_ORIGIN",
    "Calibration",
    "UsageLog",
    "UsageLogError",
    "UsageMemory",
    "UsageMemoryConfig",
    "UsageMemoryStage",
    "UsageRecord",
    "UsageRecorder",
    "as_usage_records",
    "read_usage_log",
    "records_to_queries",
    "write_usage_log",
]
