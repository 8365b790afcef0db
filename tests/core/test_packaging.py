"""The four distributions' packaging metadata stays buildable by today's setuptools.

setuptools 77 deprecated a TOML-table ``project.license`` and ``License ::`` classifiers, and says builds using them
stop working after 2027-02-18; a fresh clone's ``pip install -e .`` would then fail. Each pyproject therefore
declares an SPDX expression, ships its license text, and asks for a setuptools that reads both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = [ROOT, *sorted(p.parent for p in (ROOT / "integrations").glob("*/pyproject.toml"))]


def test_every_distribution_is_checked() -> None:
    assert [p.relative_to(ROOT).as_posix() for p in PROJECTS] == [
        ".",
        "integrations/langchain",
        "integrations/llama_index",
        "integrations/pydantic_ai",
    ]


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_license_is_an_spdx_expression_with_its_text(project: Path) -> None:
    data = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    meta = data["project"]
    assert meta["license"] == "Apache-2.0", "project.license must be an SPDX string, not a table"
    assert not [c for c in meta.get("classifiers", []) if c.startswith("License ::")]
    files = meta["license-files"]
    assert files, "no license-files"
    for pattern in files:
        found = list(project.glob(pattern))
        assert found, f"{project.name}: license file {pattern!r} missing"
        assert all("Apache License" in f.read_text(encoding="utf-8")[:200] for f in found)

    requires = data["build-system"]["requires"]
    (setuptools,) = [r for r in requires if re.match(r"setuptools\b", r)]
    m = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools.replace(" ", ""))
    assert m and int(m.group(1)) >= 77, f"{setuptools!r}: SPDX license expressions need setuptools>=77"
