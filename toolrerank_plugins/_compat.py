"""Deprecated config field names: read the old name (with a DeprecationWarning), write the new one.

The glossary these names follow is in ``docs/engine.md`` ("Counts and depths").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

# The limits of JSON fields in records hold for config values too (a stage's untyped ``params``): integers
# past MAX_INT_BITS cannot be meant, and nesting past MAX_NESTING is refused before ``json`` could hit
# Python's recursion limit on save.
from toolrerank_plugins.records import MAX_INT_BITS, MAX_NESTING, find_surrogate


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


def check_config_value(value: Any) -> Any:
    """``value`` if a config may hold it, else ``ValueError`` naming the problem: a config is saved as
    ``config.json`` and must load back as it was, so no lone surrogate (text that cannot be written as UTF-8),
    NaN or infinity (JSON has neither), integer past 1,024 bits or nesting past 64 levels, in a field or
    anywhere inside an untyped value (a stage's ``params``). Other types are left to the field's own type.

    Example:
        >>> check_config_value({"w": [1.0, "ok"]})
        {'w': [1.0, 'ok']}
    """
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        v, where, depth = stack.pop()
        at = f" at {where}" if where else ""
        if isinstance(v, str):
            m = find_surrogate(v)
            if m is not None:
                raise ValueError(
                    f"holds a lone surrogate character{at} (U+{ord(m.group()):04X} at position {m.start()}), "
                    "which cannot be written as UTF-8; decode the input with errors='replace' or remove it"
                )
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"{v!r}{at} is not a finite number (a config cannot hold NaN or infinity)")
        elif isinstance(v, int) and not isinstance(v, bool):
            if v.bit_length() > MAX_INT_BITS:
                raise ValueError(f"integer{at} is too large (more than {MAX_INT_BITS} bits)")
        elif isinstance(v, (Mapping, list, tuple)):
            if depth >= MAX_NESTING:
                raise ValueError(f"nested more than {MAX_NESTING} levels deep{at}")
            items = v.items() if isinstance(v, Mapping) else enumerate(v)
            for k, item in items:
                if isinstance(k, str):
                    stack.append((k, f"{where}[{k!r:.40}] (a key)", depth + 1))
                stack.append((item, f"{where}[{k!r:.40}]", depth + 1))
    return value


class ConfigModel(BaseModel):
    """Base of the library's configs: unknown keys, NaN and infinity are validation errors, and so is any
    value :func:`check_config_value` refuses (a lone surrogate, a huge integer) anywhere in a field, so a
    config that validates saves and loads back unchanged."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        if isinstance(value, (str, float, int, Mapping, list, tuple)):
            return check_config_value(value)
        return value  # nested models checked themselves; None, enums' own types pass


class RenamedFieldsModel(ConfigModel):
    """Base of configs whose fields were renamed: ``renamed_fields`` maps each old name to its new one.

    Old names are read (with a DeprecationWarning) and written under the new name; a read-only property per
    old name, defined in the config class, keeps attribute access working.
    """

    renamed_fields: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        return rename_fields(data, cls.renamed_fields, cls.__name__) if cls.renamed_fields else data
