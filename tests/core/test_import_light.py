from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolrerank_plugins._extras import EXTRA_FOR_MODULE, require
from toolrerank_plugins.errors import MissingExtraError

ROOT = Path(__file__).resolve().parents[2]


def test_import_does_not_load_heavy_or_framework_modules() -> None:
    code = (
        "import sys, toolrerank_plugins, toolrerank_plugins.testing, toolrerank_plugins.graph, toolrerank_plugins.cli;"
        "heavy = ['torch', 'sentence_transformers', 'faiss', 'transformers', 'bm25s', 'langchain_core',"
        " 'langchain', 'llama_index', 'networkx', 'scipy'];"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_resolving_every_public_name_of_the_lazy_packages_stays_light() -> None:
    # These packages' names resolve through lazy_exports; resolving them may import their modules but no
    # heavy dependency (those load inside the functions that use them).
    code = (
        "import sys; from toolrerank_plugins import *; from toolrerank_plugins.testing import *;"
        "from toolrerank_plugins.graph import *;"
        "heavy = ['torch', 'sentence_transformers', 'faiss', 'transformers', 'bm25s', 'langchain_core',"
        " 'langchain', 'llama_index', 'networkx', 'scipy'];"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_core_sources_never_import_frameworks() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+(langchain\w*|llama_index|langgraph)\b", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "toolrerank_plugins").rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_every_extra_hint_exists_in_pyproject() -> None:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = data["project"]["optional-dependencies"]
    for module, (extra, dist) in EXTRA_FOR_MODULE.items():
        assert extra in extras, f"{module}: extra {extra!r} missing from pyproject"
        names = [re.split(r"[<>=\[; ]", req)[0] for req in extras[extra]]
        assert dist in names, f"{module}: {dist!r} not in extra {extra!r}: {names}"


def test_missing_module_error_names_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"toolrerank-plugins\[graph\]"):
        EXTRA_FOR_MODULE["definitely_not_installed_mod"] = ("graph", "networkx")
        try:
            require("definitely_not_installed_mod")
        finally:
            del EXTRA_FOR_MODULE["definitely_not_installed_mod"]
