"""benchmarks/default_latency.py: the engines it times are the presets, with only the settings asked for."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import default_latency as dl  # noqa: E402

from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402


def test_without_settings_each_engine_is_its_preset() -> None:
    assert dl._config("hybrid", None) == pipeline_config("hybrid")
    assert dl._config("default", None, None) == pipeline_config("default")
    serial = dl._config("default-serial", None)
    assert serial.parallel_requests is False and serial.stages == pipeline_config("default").stages


def test_threads_index_and_device_change_only_the_dense_settings() -> None:
    for name in ("hybrid", "default", "default-serial"):
        plain = dl._config(name, None)
        cfg = dl._config(name, 2, "hnsw")
        assert cfg.dense.torch_threads == 2 and cfg.dense.index == "hnsw"
        assert cfg.dense.model_dump(exclude={"torch_threads", "index"}) == plain.dense.model_dump(
            exclude={"torch_threads", "index"}
        )
        assert cfg.model_dump(exclude={"dense"}) == plain.model_dump(exclude={"dense"})
        only_index = dl._config(name, None, "hnsw")
        assert only_index.dense.index == "hnsw" and only_index.dense.torch_threads == plain.dense.torch_threads
        on_cpu = dl._config(name, None, None, "cpu")
        assert on_cpu.dense.device == "cpu" and on_cpu.dense.index == plain.dense.index


def test_the_thread_choice_is_the_cheapest_count_each_chooser_measured() -> None:
    from toolrerank_plugins import Engine, EngineConfig
    from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    assert dl._thread_choice(engine) == {}  # an encoder without choosers

    class Measured(FakeEmbedder):
        def thread_costs(self) -> dict[str, dict[int, float]]:
            return {"alone": {1: 3.0, 2: 1.0, 4: 2.0}, "beside": {1: 1.0, 2: 1.5}}

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=Measured())
    assert dl._thread_choice(engine) == {"alone": 2, "beside": 1}
