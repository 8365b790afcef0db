from __future__ import annotations

__version__ = "0.1.0"
#: Version of the on-disk engine format; bump on incompatible changes.
FORMAT_VERSION = 1
