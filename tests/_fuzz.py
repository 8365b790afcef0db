"""The hypothesis budget of the property-based tests.

CI runs a small budget; a long local run sets ``TOOLRERANK_FUZZ_EXAMPLES`` (see ``docs/reliability.md``)::

    TOOLRERANK_FUZZ_EXAMPLES=2000 python -m pytest -q -m fuzz
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ = settings(
    max_examples=int(os.environ.get("TOOLRERANK_FUZZ_EXAMPLES", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
