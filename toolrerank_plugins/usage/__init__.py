"""Learning from the agent's own usage (``docs/usage.md``); every name lives in a module of this package.

Example:
    >>> from toolrerank_plugins.usage import UsageRecord
    >>> UsageRecord("weather in Oslo", calls=("forecast",)).served
    ('forecast',)
"""

from __future__ import annotations

# Every public name of the module this package replaced; __all__ (the star-import list) is unchanged.
from toolrerank_plugins.usage.stage import (  # noqa: F401
    CALIBRATION_FILE,
    MEMORY_FILE,
    MEMORY_FORMAT,
    N_FEATURES,
    RANK_BINS,
    STAGE_TYPE,
    USAGE_EDGE_ORIGIN,
    VECTORS_FILE,
    VOTE_BINS,
    Calibration,
    UsageLog,
    UsageLogError,
    UsageMemory,
    UsageMemoryConfig,
    UsageMemoryStage,
    UsageRecord,
    UsageRecorder,
    as_usage_records,
    memorised_split,
    read_usage_log,
    records_to_queries,
    write_usage_log,
)

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
