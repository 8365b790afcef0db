"""The lazy-import mechanism: ``import_object("module:attr")`` and ``lazy_exports`` for package ``__init__`` files."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolrerank_plugins._extras import EXTRA_FOR_MODULE, import_object, lazy_exports
from toolrerank_plugins.errors import MissingExtraError
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.retrieval.hybrid import HybridConfig


@pytest.fixture
def scratch_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for throw-away modules; whatever the test imports from it is forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("_scratch_"):
            del sys.modules[name]


def test_import_object_returns_the_named_object() -> None:
    assert import_object("toolrerank_plugins.records:ToolSpec") is ToolSpec


def test_import_object_follows_a_dotted_attribute() -> None:
    assert import_object("toolrerank_plugins.retrieval.hybrid:HybridConfig.model_validate") == (
        HybridConfig.model_validate
    )


@pytest.mark.parametrize("reference", ["toolrerank_plugins.records", ":ToolSpec", "toolrerank_plugins.records:", ""])
def test_import_object_rejects_a_malformed_reference(reference: str) -> None:
    with pytest.raises(ValueError, match="'module:attribute'"):
        import_object(reference)


def test_import_object_names_the_reference_when_the_module_is_missing() -> None:
    with pytest.raises(ImportError, match=r"cannot import 'toolrerank_plugins\.no_such_module:X'") as info:
        import_object("toolrerank_plugins.no_such_module:X")
    assert not isinstance(info.value, MissingExtraError)


def test_import_object_names_the_reference_when_the_attribute_is_missing() -> None:
    with pytest.raises(ImportError, match=r"'toolrerank_plugins\.records' has no attribute 'NoSuchThing'"):
        import_object("toolrerank_plugins.records:NoSuchThing")
    with pytest.raises(ImportError, match=r"'toolrerank_plugins\.records\.ToolSpec' has no attribute 'nope'"):
        import_object("toolrerank_plugins.records:ToolSpec.nope")


def test_import_object_names_the_extra_when_a_heavy_dependency_is_missing(
    scratch_modules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (scratch_modules / "_scratch_needs_heavy.py").write_text("import definitely_not_installed_mod\nX = 1\n")
    monkeypatch.setitem(EXTRA_FOR_MODULE, "definitely_not_installed_mod", ("graph", "networkx"))
    with pytest.raises(MissingExtraError, match=r"toolrerank-plugins\[graph\]"):
        import_object("_scratch_needs_heavy:X")


def test_import_object_lets_an_inner_missing_extra_error_through(scratch_modules: Path) -> None:
    (scratch_modules / "_scratch_requires.py").write_text(
        "from toolrerank_plugins.errors import MissingExtraError\n"
        "raise MissingExtraError(\"install it with: pip install 'toolrerank-plugins[dense]'\")\n"
    )
    with pytest.raises(MissingExtraError, match=r"toolrerank-plugins\[dense\]"):
        import_object("_scratch_requires:X")


@pytest.fixture
def lazy_package(scratch_modules: Path) -> Iterator[types.ModuleType]:
    """A package ``_scratch_pkg`` whose names come from ``_scratch_impl`` through :func:`lazy_exports`."""
    (scratch_modules / "_scratch_impl.py").write_text("VALUE = 42\n\ndef helper():\n    return 'ok'\n")
    package = types.ModuleType("_scratch_pkg")
    package.EAGER = "here"  # type: ignore[attr-defined]
    exports = {"VALUE": "_scratch_impl", "helper": "_scratch_impl", "GONE": "_scratch_impl"}
    # What ``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)`` does in a package's __init__:
    package.__dict__["__getattr__"], package.__dict__["__dir__"] = lazy_exports("_scratch_pkg", exports)
    sys.modules["_scratch_pkg"] = package
    yield package
    del sys.modules["_scratch_pkg"]


def test_lazy_exports_import_the_module_on_first_access_only(lazy_package: types.ModuleType) -> None:
    assert "_scratch_impl" not in sys.modules
    assert lazy_package.VALUE == 42
    assert "_scratch_impl" in sys.modules
    assert lazy_package.helper() == "ok"
    from _scratch_pkg import helper  # type: ignore[import-not-found]

    assert helper is sys.modules["_scratch_impl"].helper


def test_lazy_exports_do_not_cache_so_the_defining_module_stays_authoritative(
    lazy_package: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lazy_package.VALUE == 42
    assert "VALUE" not in vars(lazy_package)
    monkeypatch.setattr(sys.modules["_scratch_impl"], "VALUE", 7)
    assert lazy_package.VALUE == 7


def test_lazy_exports_dir_lists_globals_and_exports(lazy_package: types.ModuleType) -> None:
    listed = dir(lazy_package)
    assert {"EAGER", "VALUE", "helper", "GONE"} <= set(listed)
    assert listed == sorted(listed)
    assert "_scratch_impl" not in sys.modules  # listing imports nothing


def test_lazy_exports_unknown_name_raises_attribute_error(lazy_package: types.ModuleType) -> None:
    with pytest.raises(AttributeError, match=r"module '_scratch_pkg' has no attribute 'nope'") as info:
        _ = lazy_package.nope
    assert info.value.name == "nope"
    assert not hasattr(lazy_package, "nope")


def test_lazy_exports_name_the_module_that_fails_to_define_an_export(lazy_package: types.ModuleType) -> None:
    with pytest.raises(AttributeError, match=r"'_scratch_pkg' has no attribute 'GONE' \('_scratch_impl'"):
        _ = lazy_package.GONE


@pytest.mark.parametrize(("extra", "whole"), [("dense", True), ("bm25", True), ("graph", True), ("mcp", False)])
def test_a_default_pipeline_extra_names_all_three(monkeypatch: pytest.MonkeyPatch, extra: str, whole: bool) -> None:
    """Issue 26 item 8: a core-only install was told to add [dense], then met [bm25], then [graph]."""
    from toolrerank_plugins._extras import require

    monkeypatch.setitem(EXTRA_FOR_MODULE, "definitely_not_installed_mod", (extra, "x"))
    with pytest.raises(MissingExtraError) as info:
        require("definitely_not_installed_mod")
    message = str(info.value)
    assert f'pip install -e ".[{extra}]"' in message
    assert ('[dense], [bm25] and [graph] together: pip install -e ".[all]"' in message) == whole
