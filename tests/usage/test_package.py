"""``toolrerank_plugins.usage`` is a package of one module per concern; every name the single module it replaced
had stays importable from the package, as the object its defining module holds."""

from __future__ import annotations

import importlib

import pytest

import toolrerank_plugins.usage as usage

#: Every public name of the former ``toolrerank_plugins/usage.py``, with the module that now defines it.
DEFINED_IN: dict[str, str] = {
    "UsageLogError": "records",
    "UsageRecord": "records",
    "as_usage_records": "records",
    "records_to_queries": "records",
    "UsageLog": "log",
    "read_usage_log": "log",
    "write_usage_log": "log",
    "UsageRecorder": "log",
    "MEMORY_FILE": "memory",
    "VECTORS_FILE": "memory",
    "MEMORY_FORMAT": "memory",
    "UsageMemory": "memory",
    "VOTE_BINS": "calibration",
    "RANK_BINS": "calibration",
    "N_FEATURES": "calibration",
    "Calibration": "calibration",
    "UsageMemoryConfig": "config",
    "USAGE_EDGE_ORIGIN": "edges",
    "CALIBRATION_FILE": "stage",
    "UsageMemoryStage": "stage",
    "STAGE_TYPE": "stage",
    "memorised_split": "evaluation",
}


@pytest.mark.parametrize("name", sorted(DEFINED_IN))
def test_every_former_name_resolves_to_its_modules_object(name: str) -> None:
    module = importlib.import_module(f"toolrerank_plugins.usage.{DEFINED_IN[name]}")
    assert getattr(usage, name) is getattr(module, name)


def test_star_import_list_is_unchanged() -> None:
    assert usage.__all__ == [
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


def test_the_stage_registry_finds_the_usage_memory_stage() -> None:
    from toolrerank_plugins.stages import get_stage_type

    assert get_stage_type("usage_memory") is usage.STAGE_TYPE
    assert usage.STAGE_TYPE.config_model is usage.UsageMemoryConfig
