"""Deprecated config field names: read the old name (with a DeprecationWarning), write the new one.

The glossary these names follow is in ``docs/engine.md`` ("Counts and depths").
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, model_validator


def rename_fields(data: Any, renames: Mapping[str, str], model: str) -> Any:
    """``data`` (a config being validated) with deprecated keys moved to their new names.

    Giving both names is an error: the caller would not know which one wins.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     rename_fields({"candidate_k": 30}, {"candidate_k": "depth"}, "EngineConfig")
        {'depth': 30}
    """
    if not isinstance(data, Mapping):
        return data
    old_names = [old for old in renames if old in data]
    if not old_names:
        return data
    out = dict(data)
    for old in old_names:
        new = renames[old]
        if new in out:
            raise ValueError(f"{model}: give {new!r} only ({old!r} is its deprecated name)")
        warnings.warn(f"{model}.{old} is deprecated; use {new} (same meaning)", DeprecationWarning, stacklevel=2)
        out[new] = out.pop(old)
    return out


def warn_renamed(model: str, old: str, new: str) -> None:
    """Warn that attribute ``old`` of ``model`` is read under its deprecated name."""
    warnings.warn(f"{model}.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


class RenamedFieldsModel(BaseModel):
    """Base of configs whose fields were renamed: ``renamed_fields`` maps each old name to its new one.

    Old names are read (with a DeprecationWarning) and written under the new name; a read-only property per
    old name, defined in the config class, keeps attribute access working.
    """

    renamed_fields: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        return rename_fields(data, cls.renamed_fields, cls.__name__) if cls.renamed_fields else data
