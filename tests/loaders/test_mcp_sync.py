"""``Engine.sync``: a server's new ``tools/list`` adds, updates and removes only what changed.

Ids stay stable, unchanged APIs are not re-encoded (a counting embedder records every text it encodes), other
servers' APIs are untouched, and a failing sync changes nothing. tests/loaders/test_mcp_live.py does the same
against a real server whose tool list changes during a session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins import CatalogError, Engine, EngineConfig, ToolSpec
from toolrerank_plugins.engine import SyncReport
from toolrerank_plugins.loaders import from_mcp_tools
from toolrerank_plugins.testing import FakeEmbedder


class CountingEmbedder(FakeEmbedder):
    """A FakeEmbedder that keeps every text it was asked to encode."""

    def __init__(self) -> None:
        super().__init__(dimension=64)
        self.seen: list[str] = []

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        self.seen.extend(texts)
        return super().encode(texts, **kwargs)


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"name": name, "description": description, "inputSchema": {"type": "object", "properties": props}}


GIT = [
    _tool("git_log", "Shows the commit logs", repo_path="Path of the repository"),
    _tool("git_status", "Shows the working tree status", repo_path="Path of the repository"),
    _tool("git_push", "Pushes commits to the remote", remote="Remote name"),
]
TIME = [
    _tool("get_current_time", "Get current time in a specific timezone", timezone="IANA timezone name"),
    _tool("convert_time", "Convert time between timezones", time="HH:MM"),
]


def _engine(retriever: str = "dense") -> tuple[Engine, CountingEmbedder]:
    embedder = CountingEmbedder()
    catalog = from_mcp_tools({"git": GIT, "time": TIME})
    engine = Engine.build(catalog, EngineConfig(retriever=retriever), embedder=embedder)  # type: ignore[arg-type]
    embedder.seen.clear()
    return engine, embedder


def _new_git() -> list[dict[str, Any]]:
    """git's next tools/list: git_log unchanged, git_status reworded, git_push gone, git_show new."""
    return [
        GIT[0],
        _tool("git_status", "Shows the working tree status, staged and unstaged", repo_path="Path of the repository"),
        _tool("git_show", "Shows the contents of a commit", revision="Commit or revision"),
    ]


@pytest.mark.parametrize("retriever", ["dense", "bm25", "hybrid"])
def test_sync_changes_only_what_changed_in_one_server(retriever: str) -> None:
    engine, embedder = _engine(retriever)
    before = engine.catalog
    time_specs = [before[i] for i in ("time/get_current_time", "time/convert_time")]

    report = engine.sync(from_mcp_tools({"git": _new_git()}), tool="git")

    assert report == SyncReport(
        added=("git/git_show",),
        updated=("git/git_status",),
        removed=("git/git_push",),
        reencoded=("git/git_status",),
    )
    after = engine.catalog
    # ids stable, positions kept, new APIs at the end; the time server's specs are the very same objects
    assert after.ids == ["git/git_log", "git/git_status", "time/get_current_time", "time/convert_time", "git/git_show"]
    assert [after[s.id] for s in time_specs] == time_specs and all(after[s.id] is s for s in time_specs)
    assert after["git/git_log"] is before["git/git_log"]
    assert after["git/git_status"].description.endswith("staged and unstaged")
    # only the changed and the new texts were encoded (none at all for bm25)
    if retriever == "bm25":
        assert embedder.seen == []
    else:
        assert embedder.seen == [engine.render(after["git/git_status"]), engine.render(after["git/git_show"])]
    assert engine.first_stage.ids == after.ids
    assert engine.search("show the contents of a commit", top_k=1)[0].id == "git/git_show"
    assert "git/git_push" not in [h.id for h in engine.search("push commits to the remote", top_k=5)]


def test_a_second_identical_sync_changes_nothing() -> None:
    engine, embedder = _engine()
    engine.sync(from_mcp_tools({"git": _new_git()}), tool="git")
    embedder.seen.clear()
    state = engine.first_stage
    report = engine.sync(from_mcp_tools({"git": _new_git()}), tool="git")
    assert report == SyncReport() and not report.changed
    assert embedder.seen == [] and engine.first_stage is state  # no new snapshot at all


def test_a_change_the_text_does_not_show_is_not_reencoded() -> None:
    engine, embedder = _engine()
    annotated = [{**GIT[0], "annotations": {"readOnlyHint": True}}, *GIT[1:]]
    report = engine.sync(from_mcp_tools({"git": annotated}), tool="git")
    assert report.updated == ("git/git_log",) and report.reencoded == ()
    assert embedder.seen == []
    assert engine.catalog["git/git_log"].metadata["annotations"] == {"readOnlyHint": True}


def test_sync_without_a_tool_replaces_the_whole_catalog() -> None:
    engine, embedder = _engine()
    report = engine.sync(from_mcp_tools({"time": TIME}))
    assert report.removed == ("git/git_log", "git/git_status", "git/git_push") and report.added == ()
    assert engine.catalog.ids == ["time/get_current_time", "time/convert_time"] and embedder.seen == []


def test_a_server_that_lists_no_tools_any_more_is_emptied() -> None:
    engine, _ = _engine()
    report = engine.sync(from_mcp_tools({"git": []}), tool="git")
    assert report.removed == ("git/git_log", "git/git_status", "git/git_push")
    assert engine.catalog.ids == ["time/get_current_time", "time/convert_time"]
    engine.sync([], tool="time")  # every API gone: allowed, as with remove()
    assert len(engine.catalog) == 0 and engine.search("time", top_k=3) == []
    engine.sync(from_mcp_tools({"time": TIME}), tool="time")  # and a server can come back
    assert engine.search("current time in a timezone", top_k=1)[0].id == "time/get_current_time"


@pytest.mark.parametrize(
    ("new", "tool", "error", "message"),
    [
        (lambda: from_mcp_tools({"time": TIME}), "git", CatalogError, "API 'time/get_current_time' belongs to tool"),
        (
            lambda: [ToolSpec(id="time/convert_time", name="x", tool="git")],
            "git",
            CatalogError,
            "API id 'time/convert_time' is already taken by an API of tool 'time'",
        ),
        (lambda: from_mcp_tools({"git": GIT}), 5, TypeError, "'tool' must be a tool name"),
        (lambda: ["not a spec"], "git", CatalogError, "expected a ToolSpec"),
    ],
)
def test_a_failing_sync_changes_nothing(new: Any, tool: Any, error: type[Exception], message: str) -> None:
    engine, embedder = _engine()
    catalog, first_stage = engine.catalog, engine.first_stage
    with pytest.raises(error, match=message):
        engine.sync(new(), tool=tool)
    assert engine.catalog is catalog and engine.first_stage is first_stage and embedder.seen == []


def test_sync_keeps_the_engine_saveable(tmp_path: Any) -> None:
    engine, _ = _engine()
    engine.sync(from_mcp_tools({"git": _new_git()}), tool="git")
    engine.save(tmp_path / "e")
    loaded = Engine.load(tmp_path / "e", embedder=FakeEmbedder(64))
    assert loaded.catalog.ids == engine.catalog.ids
    query = "show the contents of a commit"
    assert [h.id for h in loaded.search(query, top_k=3)] == [h.id for h in engine.search(query, top_k=3)]
