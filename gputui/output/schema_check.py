"""Checking a JSON document against gputui's own schema files, without the jsonschema package (a dev
dependency only).

It knows the subset of JSON Schema (2020-12) that gputui/schema/*.json use, and refuses a schema that uses
any other keyword, so a check can never be skipped in silence. Stricter than the standard where the
program needs it: numbers are finite and within +-2**63 (a 400-digit integer or 1e308 breaks arithmetic
and formatting downstream), an integer is a JSON integer (not 1.0), and `$` in a pattern matches only at
the very end, as in ECMAScript (Python's `$` also matches before a final newline).

The schema is compiled once into a tree of small functions: a recording holds thousands of snapshots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

ANNOTATIONS = frozenset({"$schema", "$id", "title", "description"})
KEYWORDS = frozenset(
    {
        "type",
        "const",
        "enum",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minimum",
        "maximum",
        "pattern",
        "propertyNames",
    }
)
LIMIT = 2**63  # an int: comparing a 400-digit integer with a float overflows
# What json.loads makes of each JSON type; exact types, so that a bool is never an integer.
TYPES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}
NAMES = {
    type(None): "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}

Check = Callable[[Any], Any]


class SchemaError(ValueError):
    """The document does not follow the schema; the message says where and why, in one line."""

    def __init__(self, why: str, where: str = "") -> None:
        super().__init__(f"${where}: {why}")
        self.why, self.where = why, where

    def inside(self, step: str) -> SchemaError:
        return SchemaError(self.why, step + self.where)


def supported(schema: Mapping[str, Any]) -> None:
    """Raises SchemaError if `schema` uses a keyword or type this checker does not know."""
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise SchemaError(f"schema keyword(s) not supported: {', '.join(sorted(unknown))}")
    types = schema.get("type", [])
    for kind in types if isinstance(types, list) else [types]:
        if kind not in TYPES:
            raise SchemaError(f"schema type not supported: {kind!r}")
    for sub in (
        *schema.get("properties", {}).values(),
        schema.get("items"),
        schema.get("propertyNames"),
        schema.get("additionalProperties"),
    ):
        if isinstance(sub, Mapping):
            supported(sub)


class Checker:
    """`Checker(schema, text)(document)`: the document, checked (SchemaError at the first place it breaks
    the schema), with `text` applied to every string the schema describes. What the schema leaves open
    (an object of any content) is returned as it is. Its depth is the schema's: a document nested deeper
    than the schema is not walked past the level where the schema ends."""

    def __init__(self, schema: Mapping[str, Any], text: Callable[[str], str] = str) -> None:
        supported(schema)
        self.text = text
        self._check = self._compile(schema)

    def __call__(self, document: Any) -> Any:
        return self._check(document)

    def _compile(self, schema: Mapping[str, Any]) -> Check:
        steps = [
            step
            for step in (self._kind(schema), _const(schema), _enum(schema), _number(schema), _pattern(schema))
            if step is not None
        ]
        inner = self._items(schema) or self._object(schema)
        text = self.text

        def check(value: Any) -> Any:
            for step in steps:
                step(value)
            if inner is not None and type(value) in (list, dict):
                return inner(value)
            return text(value) if type(value) is str else value

        return check

    def _kind(self, schema: Mapping[str, Any]) -> Check | None:
        if "type" not in schema:
            return None
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        allowed = frozenset(t for name in names for t in TYPES[name])
        expected = " or ".join(names)

        def kind(value: Any) -> None:
            if type(value) not in allowed:
                found = NAMES.get(type(value), type(value).__name__)
                raise SchemaError(f"{found} where {expected} was expected")

        return kind

    def _items(self, schema: Mapping[str, Any]) -> Check | None:
        if "items" not in schema:
            return None
        item = self._compile(schema["items"])

        def items(value: Any) -> Any:
            if type(value) is not list:
                return value
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item(v))
                except SchemaError as err:
                    raise err.inside(f"[{i}]") from None
            return out

        return items

    def _object(self, schema: Mapping[str, Any]) -> Check | None:
        keys = ("properties", "required", "additionalProperties", "propertyNames")
        if not any(k in schema for k in keys):
            return None
        required = tuple(schema.get("required", ()))
        properties = {name: self._compile(sub) for name, sub in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties", True)
        other: Check | None = self._compile(extra) if isinstance(extra, Mapping) else None
        names = self._compile(schema["propertyNames"]) if "propertyNames" in schema else None
        closed = extra is False

        def obj(value: Any) -> Any:
            if type(value) is not dict:
                return value
            missing = [name for name in required if name not in value]
            if missing:
                raise SchemaError(f"missing {', '.join(missing)}")
            out = {}
            for name, v in value.items():
                try:
                    key = names(name) if names is not None else name
                    sub = properties.get(name) or other
                    if sub is None and closed:
                        raise SchemaError(f"unexpected field {_short(name)}")
                    out[key] = sub(v) if sub is not None else v
                except SchemaError as err:
                    raise err.inside(f".{_short(name) if name not in properties else name}") from None
            return out

        return obj


def check(value: Any, schema: Mapping[str, Any]) -> None:
    """Raises SchemaError at the first place `value` breaks `schema` (compiles it each time: for one-off
    checks; keep a Checker for many)."""
    Checker(schema)(value)


def _const(schema: Mapping[str, Any]) -> Check | None:
    if "const" not in schema:
        return None
    expected = schema["const"]

    def const(value: Any) -> None:
        if not _same(value, expected):
            raise SchemaError(f"must be {expected!r}")

    return const


def _enum(schema: Mapping[str, Any]) -> Check | None:
    if "enum" not in schema:
        return None
    options = tuple(schema["enum"])

    def enum(value: Any) -> None:
        if not any(_same(value, option) for option in options):
            raise SchemaError(f"{_short(value)} is not one of the allowed values")

    return enum


def _number(schema: Mapping[str, Any]) -> Check | None:
    """Every number is finite and within +-2**63, whatever the schema says; then its own bounds."""
    types = schema.get("type", ["number"])
    if not {"number", "integer"} & set(types if isinstance(types, list) else [types]):
        return None  # a value of this place is never a number (its type step said so)
    low, high = schema.get("minimum"), schema.get("maximum")

    def number(value: Any) -> None:
        if type(value) not in (int, float):
            return
        if (type(value) is float and not math.isfinite(value)) or not -LIMIT <= value <= LIMIT:
            raise SchemaError(f"{_short(value)} is out of range")
        if low is not None and value < low:
            raise SchemaError(f"{value} is below {low}")
        if high is not None and value > high:
            raise SchemaError(f"{value} is above {high}")

    return number


def _pattern(schema: Mapping[str, Any]) -> Check | None:
    if "pattern" not in schema:
        return None
    text = schema["pattern"]
    regex = re.compile(text[:-1] + r"\Z" if text.endswith("$") and not text.endswith(r"\$") else text)

    def pattern(value: Any) -> None:
        if type(value) is str and not regex.search(value):
            raise SchemaError(f"{_short(value)} does not match {text}")

    return pattern


def _same(value: Any, expected: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, "1" is not 1."""
    if isinstance(value, bool) or isinstance(expected, bool) or value is None or expected is None:
        return value is expected
    if type(value) in (int, float) and type(expected) in (int, float):
        return bool(value == expected)
    return type(value) is type(expected) and bool(value == expected)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
