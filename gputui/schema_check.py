"""Checking a JSON document against gputui's own schema files, without the jsonschema package (a dev
dependency only).

It knows the subset of JSON Schema (2020-12) that gputui/schema/*.json use, and refuses a schema that uses
any other keyword, so a check can never be skipped in silence. Stricter than the standard where the
program needs it: numbers are finite and within +-2**63 (a 400-digit integer or 1e308 breaks arithmetic
and formatting downstream), an integer is a JSON integer (not 1.0), and `$` in a pattern matches only at
the very end, as in ECMAScript (Python's `$` also matches before a final newline).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

ANNOTATIONS = frozenset({"$schema", "$id", "title", "description"})
KEYWORDS = frozenset({"type", "const", "enum", "properties", "required", "additionalProperties", "items",
                      "minimum", "maximum", "pattern", "propertyNames"})
LIMIT = 2 ** 63  # an int: comparing a 400-digit integer with a float overflows


class SchemaError(ValueError):
    """The document does not follow the schema; the message says where and why, in one line."""


def supported(schema: Mapping[str, Any]) -> None:
    """Raises SchemaError if `schema` uses a keyword this checker does not know."""
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise SchemaError(f"schema keyword(s) not supported: {', '.join(sorted(unknown))}")
    types = schema.get("type", [])
    for kind in types if isinstance(types, list) else [types]:
        _is(None, kind)  # raises on a type it does not know
    for sub in (*schema.get("properties", {}).values(), schema.get("items"), schema.get("propertyNames"),
                schema.get("additionalProperties")):
        if isinstance(sub, Mapping):
            supported(sub)


def check(value: Any, schema: Mapping[str, Any], where: str = "$") -> None:
    """Raises SchemaError at the first place `value` breaks `schema`. Its depth is the schema's: a
    document nested deeper than the schema is refused at the level where the schema ends."""
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, t) for t in types):
            raise SchemaError(f"{where}: {_kind(value)} where {' or '.join(types)} was expected")
    if "const" in schema and not _same(value, schema["const"]):
        raise SchemaError(f"{where}: must be {schema['const']!r}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        raise SchemaError(f"{where}: {_short(value)} is not one of the allowed values")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, where)
    if isinstance(value, str) and "pattern" in schema and not _pattern(schema["pattern"]).search(value):
        raise SchemaError(f"{where}: {_short(value)} does not match {schema['pattern']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        _check_object(value, schema, where)


def _check_number(value: int | float, schema: Mapping[str, Any], where: str) -> None:
    if (isinstance(value, float) and not math.isfinite(value)) or not -LIMIT <= value <= LIMIT:
        raise SchemaError(f"{where}: {_short(value)} is out of range")
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaError(f"{where}: {value} is below {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaError(f"{where}: {value} is above {schema['maximum']}")


def _check_object(value: dict[str, Any], schema: Mapping[str, Any], where: str) -> None:
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        raise SchemaError(f"{where}: missing {', '.join(missing)}")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if "propertyNames" in schema:
            check(name, schema["propertyNames"], f"{where} key")
        if name in properties:
            check(item, properties[name], f"{where}.{name}")
        elif extra is False:
            raise SchemaError(f"{where}: unexpected field {_short(name)}")
        elif isinstance(extra, Mapping):
            check(item, extra, f"{where}.{_short(name)}")


def _is(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    raise SchemaError(f"schema type not supported: {kind!r}")


def _same(value: Any, expected: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, "1" is not 1."""
    if isinstance(value, bool) or isinstance(expected, bool) or value is None or expected is None:
        return value is expected
    if _is(value, "number") and _is(expected, "number"):
        return bool(value == expected)
    return type(value) is type(expected) and bool(value == expected)


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@lru_cache(maxsize=64)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$")
                      else pattern)
