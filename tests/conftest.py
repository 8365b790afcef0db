from __future__ import annotations

import os

import pytest

# Models load from local folders only; make any accidental hub access fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def without_torchscript_onnx_exporter(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """torch's ``onnx.export`` as on a torch whose TorchScript exporter is gone (deprecated since torch 2.9, which
    says it "will be removed"): ``dynamo=False`` raises. Yields the ``dynamo`` flag of each call made."""
    torch = pytest.importorskip("torch")
    real = torch.onnx.export
    calls: list[bool] = []

    def export(*args: object, dynamo: bool = True, **kwargs: object) -> object:
        calls.append(dynamo)
        if not dynamo:
            raise RuntimeError("the TorchScript-based ONNX exporter has been removed")
        return real(*args, dynamo=dynamo, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", export)
    return calls
