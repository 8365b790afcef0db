"""The root package's public names: pinned, resolvable, listed by dir(), and each the object its module defines."""

from __future__ import annotations

import importlib

import pytest

import toolrerank_plugins

#: Every name ``from toolrerank_plugins import *`` gives, with the module that defines it.
EXPECTED: dict[str, str] = {
    "Catalog": "toolrerank_plugins.catalog",
    "CatalogError": "toolrerank_plugins.errors",
    "ConfigError": "toolrerank_plugins.errors",
    "Edge": "toolrerank_plugins.records",
    "Engine": "toolrerank_plugins.engine",
    "EngineConfig": "toolrerank_plugins.engine",
    "FORMAT_VERSION": "toolrerank_plugins._version",
    "FirstStage": "toolrerank_plugins.retrieval.base",
    "Hit": "toolrerank_plugins.retrieval.base",
    "LLM": "toolrerank_plugins.llm",
    "LabelledQuery": "toolrerank_plugins.records",
    "MissingExtraError": "toolrerank_plugins.errors",
    "PersistenceError": "toolrerank_plugins.errors",
    "SaveError": "toolrerank_plugins.errors",
    "QueryError": "toolrerank_plugins.errors",
    "StoreError": "toolrerank_plugins.errors",
    "StaleStoreError": "toolrerank_plugins.errors",
    "RenderConfig": "toolrerank_plugins.render",
    "ScoredTool": "toolrerank_plugins.records",
    "SearchResult": "toolrerank_plugins.engine",
    "Stage": "toolrerank_plugins.stages",
    "StageContext": "toolrerank_plugins.stages",
    "StageSpec": "toolrerank_plugins.stages",
    "StageType": "toolrerank_plugins.stages",
    "ToolRerankError": "toolrerank_plugins.errors",
    "ToolSpec": "toolrerank_plugins.records",
    "__version__": "toolrerank_plugins._version",
    "default_catalog_path": "toolrerank_plugins.catalog",
    "evaluate": "toolrerank_plugins.evaluation",
    "from_callables": "toolrerank_plugins.loaders",
    "from_mcp_tools": "toolrerank_plugins.loaders",
    "from_openai_tools": "toolrerank_plugins.loaders",
    "from_openapi": "toolrerank_plugins.loaders",
    "known_pipelines": "toolrerank_plugins.pipelines",
    "load_catalog": "toolrerank_plugins.loaders",
    "load_catalog_file": "toolrerank_plugins.loaders",
    "load_queries": "toolrerank_plugins.loaders",
    "pipeline_config": "toolrerank_plugins.pipelines",
    "register_first_stage": "toolrerank_plugins.retrieval.base",
    "register_llm": "toolrerank_plugins.llm",
    "register_pipeline": "toolrerank_plugins.pipelines",
    "register_stage_type": "toolrerank_plugins.stages",
    "render_tool": "toolrerank_plugins.render",
}


def test_all_is_pinned() -> None:
    assert len(toolrerank_plugins.__all__) == len(set(toolrerank_plugins.__all__))
    assert sorted(toolrerank_plugins.__all__) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_name_resolves_to_its_modules_object(name: str) -> None:
    value = getattr(toolrerank_plugins, name)
    assert value is getattr(importlib.import_module(EXPECTED[name]), name)


def test_star_import_gives_every_name() -> None:
    namespace: dict[str, object] = {}
    exec("from toolrerank_plugins import *", namespace)
    assert set(EXPECTED) <= set(namespace)


def test_dir_lists_every_public_name() -> None:
    listed = dir(toolrerank_plugins)
    assert set(EXPECTED) <= set(listed)
    assert "__getattr__" in listed  # module globals are listed too
    assert listed == sorted(listed)


def test_an_unknown_name_raises_attribute_error_naming_the_package() -> None:
    with pytest.raises(AttributeError, match=r"'toolrerank_plugins' has no attribute 'NoSuchName'"):
        _ = toolrerank_plugins.NoSuchName  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from toolrerank_plugins import NoSuchName", {})


def test_default_catalog_path_lives_next_to_catalog_and_testing_re_exports_it() -> None:
    import toolrerank_plugins.testing
    import toolrerank_plugins.testing.catalogs
    from toolrerank_plugins.catalog import default_catalog_path

    assert toolrerank_plugins.default_catalog_path is default_catalog_path
    assert toolrerank_plugins.testing.default_catalog_path is default_catalog_path
    assert toolrerank_plugins.testing.catalogs.default_catalog_path is default_catalog_path
    root = default_catalog_path()
    assert root.is_dir()
    assert {p.name for p in root.iterdir()} >= {"tools.jsonl", "queries.jsonl", "edges.jsonl"}


@pytest.mark.parametrize("package", ["toolrerank_plugins.graph", "toolrerank_plugins.testing"])
def test_lazy_packages_list_and_resolve_their_names(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=rf"'{package}' has no attribute 'NoSuchName'"):
        _ = module.NoSuchName
