from __future__ import annotations

import os

# Models load from local folders only; make any accidental hub access fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
