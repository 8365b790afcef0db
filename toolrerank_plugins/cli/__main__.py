"""``python -m toolrerank_plugins.cli``: the ``toolrerank`` command."""

from __future__ import annotations

from toolrerank_plugins.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
