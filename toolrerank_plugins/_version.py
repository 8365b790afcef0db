from __future__ import annotations

__version__ = "0.1.0"
#: Version of the on-disk engine format; bump on incompatible changes. 2: config fields renamed to the
#: count/depth glossary (``depth`` for ``candidate_k``, ...); format-1 directories still load.
FORMAT_VERSION = 2
