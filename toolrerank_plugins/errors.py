"""Exceptions raised by toolrerank-plugins.

Every error names the problem and, where there is one, the fix.
"""

from __future__ import annotations


class ToolRerankError(Exception):
    """Base class of every error this library raises on purpose."""


class CatalogError(ToolRerankError, ValueError):
    """A tool catalog or one of its entries is invalid (names the file, line or entry)."""


class ConfigError(ToolRerankError, ValueError):
    """A configuration is invalid or names an unknown backend."""


class QueryError(ToolRerankError, ValueError):
    """A search query is not valid text (it holds a lone surrogate character such as ``"\\ud800"``).

    Also a :class:`ValueError`, as the search methods raised before it existed, so code catching
    ``ValueError`` keeps working; ``except ToolRerankError`` now catches bad queries too.
    """


class PersistenceError(ToolRerankError):
    """A saved engine directory is missing, corrupt, foreign or from a newer format."""


class MissingExtraError(ToolRerankError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class SaveError(PersistenceError, OSError):
    """Saving an engine failed in the operating system (disk full, read-only folder, a parent that is a file).

    A :class:`PersistenceError` that is also an :class:`OSError` (``errno`` is the original one), so code that
    caught ``OSError`` from ``save`` keeps working. The previous save at the path is left as it was.

    Raised too for any other file the library writes (its one atomic write helper, ``_atomic.py``: the usage
    log's rewrite, the LLM cache, the CLI's output files), naming the file; the file is left as it was.
    """


class StoreError(ToolRerankError):
    """A shared store (a database a first stage keeps its index in) failed: unreachable after retries, or it
    refused an operation. The message names the store and the cause; nothing committed is lost."""


class StaleStoreError(StoreError):
    """Another process committed to the shared store after this engine's snapshot: the change must be made on
    the newer catalog. The engine handles it itself (it follows the other change and retries); you see it only
    when the store keeps changing under three attempts in a row."""
