"""One device resolver for every model: an explicit request is honoured or fails; default cuda -> mps -> cpu."""

from __future__ import annotations

from toolrerank_plugins._extras import require
from toolrerank_plugins.errors import ConfigError


def resolve_device(requested: str | None = None) -> str:
    """Return the torch device string to use.

    Args:
        requested: ``None``/``"auto"`` picks cuda, then mps, then cpu. Anything else (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, ``"mps"``) is honoured, or raises :class:`ConfigError` when that
            device is not available.
    """
    torch = require("torch")
    if requested in (None, "", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    dev = str(requested)
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device {dev!r} was requested but CUDA is not available; use device='cpu' or 'auto'")
        if ":" in dev and int(dev.split(":")[1]) >= torch.cuda.device_count():
            raise ConfigError(f"device {dev!r} does not exist ({torch.cuda.device_count()} CUDA devices)")
        return dev
    if dev == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError("device 'mps' was requested but MPS is not available; use 'cpu' or 'auto'")
        return dev
    if dev == "cpu":
        return dev
    raise ConfigError(f"unknown device {dev!r}; expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
