"""The one reader of the JSON files the library saves (``_atomic.read_json``) and the readers that now use it:
whatever bytes a file holds, a value or the library's error naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolrerank_plugins._atomic import read_json
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.graph.tool_graph import GraphError


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(lambda t: t.encode("utf-8")),
        st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5), lambda c: st.lists(c, max_size=3))
        .map(json.dumps)
        .map(lambda t: t.encode("utf-8")),
    )
)
def test_any_bytes_give_their_value_or_the_library_error(data: bytes, tmp_path: Path) -> None:
    file = tmp_path / "saved.json"
    file.write_bytes(data)
    try:
        value = read_json(file, "saved thing")
    except PersistenceError as exc:
        assert str(exc).startswith(f"{file}: corrupt saved thing (not ")
    else:
        assert value == json.loads(data.decode("utf-8"))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff{}", "not UTF-8"),
        (b'{"a": [1,', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),  # past the recursion limit: was a RecursionError
        (b"1" * 5_000, "not valid JSON"),  # an integer past Python's 4,300 digits
    ],
)
def test_each_problem_is_named(data: bytes, problem: str, tmp_path: Path) -> None:
    file = tmp_path / "x.json"
    file.write_bytes(data)
    with pytest.raises(GraphError, match=rf"x\.json: corrupt dependency graph \({problem}.*; advice$"):
        read_json(file, "dependency graph", error=GraphError, advice="; advice")


def test_a_missing_file_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(PersistenceError, match=r"nothing\.json: cannot read index file \(.*No such file"):
        read_json(tmp_path / "nothing.json", "index file")


def test_a_pgvector_engine_folder_with_a_corrupt_store_record(tmp_path: Path) -> None:
    """``store.json`` of a saved PostgreSQL-backed engine: nesting past the recursion limit escaped as a
    RecursionError, and a record without a version said only 'missing or corrupt'."""
    from toolrerank_plugins.retrieval.postgres import _saved_version

    record = tmp_path / "pgvector" / "store.json"
    record.parent.mkdir()
    record.write_text("[" * 100_000)
    with pytest.raises(PersistenceError, match=r"store\.json: corrupt store record \(not valid JSON"):
        _saved_version(tmp_path, "pgvector")
    record.write_text('{"versions": 3}')
    with pytest.raises(PersistenceError, match=r"store\.json: corrupt store record \(no version"):
        _saved_version(tmp_path, "pgvector")
    record.write_text('{"version": 3}')
    assert _saved_version(tmp_path, "pgvector") == 3


def test_a_model_folder_with_a_corrupt_config_is_a_config_error(tmp_path: Path) -> None:
    """A static (model2vec) encoder pointed at a folder whose config.json is not JSON: was json's own error."""
    from toolrerank_plugins.cpu_encoders import StaticEmbedder

    (tmp_path / "config.json").write_text("{model_type: model2vec")
    with pytest.raises(ConfigError, match=r"config\.json: corrupt model config \(not valid JSON"):
        StaticEmbedder(str(tmp_path)).model  # noqa: B018 (the property loads the model)


def test_a_trained_discriminator_with_corrupt_metadata_is_a_config_error(tmp_path: Path) -> None:
    """``discriminator.json`` of a trained dependency discriminator: was json's own error, or a ValueError from
    int() of its max_length."""
    pytest.importorskip("transformers")
    from toolrerank_plugins.graph.discriminator import DependencyDiscriminator

    meta = tmp_path / "discriminator.json"
    meta.write_text('{"max_length": ')
    with pytest.raises(ConfigError, match=r"discriminator\.json: corrupt discriminator metadata \(not valid JSON"):
        DependencyDiscriminator(str(tmp_path), device="cpu")
    meta.write_text('{"max_length": "long"}')
    with pytest.raises(ConfigError, match=r"discriminator\.json: corrupt discriminator metadata \('max_length'"):
        DependencyDiscriminator(str(tmp_path), device="cpu")
