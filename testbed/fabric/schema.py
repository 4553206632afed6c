"""JSON Schema checks of topology and scenario files, with every failure said
in plain words (what was expected, what was found) at its path in the file.

The schemas live in `schemas/`; problems come out in the order of the file.
"""

import difflib
import json
import math
from collections.abc import Iterable
from importlib import resources
from os import PathLike

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from .loader import SCENARIO, TOPOLOGY
from .problems import TOP, Problem, count, describe, show
from .units import spelling_hint


def _is_integer(_checker, value):
    # Unlike the default, 2.0 is not an integer: range(2.0) would fail later.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker, value):
    # YAML spells infinity and NaN as .inf and .nan; neither is a useful setting.
    # An int is never converted: one too large for a float is still a number
    # (that the bounds compare exactly), not an OverflowError.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


_Validator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def load_schema(name: str) -> dict:
    """The JSON Schema for 'topology' or 'scenario' files, as a dict."""
    text = (
        resources.files(__package__).joinpath("schemas").joinpath(f"{name}.json").read_text(encoding="utf-8")
    )
    return json.loads(text)


def _validator(name):
    # Without "$schema", jsonschema keeps using _Validator (and its stricter
    # types) when a $ref enters another schema; with it, it would switch back
    # to the stock class for that dialect.
    schemas = {
        kind: {k: v for k, v in load_schema(kind).items() if k != "$schema"} for kind in (TOPOLOGY, SCENARIO)
    }
    # The scenario schema refers to the topology schema by its file name, as
    # an editor's YAML language server resolves it (beside the scenario's).
    registry = Registry().with_resources(
        (f"{kind}.json", DRAFT202012.create_resource(s)) for kind, s in schemas.items()
    )
    return _Validator(schemas[name], registry=registry)


def schema_problems(file: str | PathLike, doc: object, kind: str) -> list[Problem]:
    """Problems of `doc` against the schema of `kind`, in document order."""
    errors = sorted(
        _said_once(_validator(kind).iter_errors(doc)), key=lambda e: _document_order(doc, e.absolute_path)
    )
    problems = [
        Problem(str(file), format_path(path), message)
        for error in errors
        for path, message in _explain(error)
    ]
    return _unique(problems)


def _said_once(errors):
    """The errors, less the pattern of a string that is too long: that it
    is too long is what to fix (and a long number is no spelling mistake)."""
    errors = list(errors)
    long = {tuple(e.absolute_path) for e in errors if e.validator == "maxLength"}
    return [e for e in errors if e.validator != "pattern" or tuple(e.absolute_path) not in long]


def _unique(items):
    return list(dict.fromkeys(items))


def _document_order(doc, path):
    """Positions of `path`'s steps in `doc`, so problems follow the file."""
    key, node = [], doc
    for step in path:
        if isinstance(node, dict):
            keys = list(node)
            key.append(keys.index(step) if step in node else len(keys))
        elif isinstance(node, list) and isinstance(step, int):
            key.append(step)
        else:
            break
        node = node[step]
    return tuple(key)


def format_path(steps: Iterable[str | int]) -> str:
    """('traffic', 0, 'dst') -> 'traffic[0].dst'; () -> '(top)'."""
    text = ""
    for step in steps:
        if isinstance(step, int) and not isinstance(step, bool):
            text += f"[{step}]"
        else:
            text += f".{step}" if text else str(step)
    return text or TOP


# Validators whose failure is better said in the schema's own "x-expected"
# words than in generic ones; the others describe structure, not a value
# (a string too long may well be a rate or a duration: say it is too long).
_STRUCTURAL = {
    "required",
    "additionalProperties",
    "uniqueItems",
    "enum",
    "const",
    "oneOf",
    "anyOf",
    "maxLength",
}


def _explain(error):
    """[(path, message)] for one jsonschema error."""
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind, value, inst = error.validator, error.validator_value, error.instance
    if "x-message" in schema:
        return [(path, schema["x-message"])]
    if kind == "required":
        return [(path + (name,), "required field is missing") for name in value if name not in inst]
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        return [(path, _unknown_field(key, allowed)) for key in inst if key not in allowed]
    if kind in ("oneOf", "anyOf"):
        return _explain_alternatives(error, path)
    expected = None if kind in _STRUCTURAL else schema.get("x-expected")
    message = f"expected {expected or _expectation(error)}, got {_found(error)}"
    if kind == "enum" and isinstance(inst, str):
        message += _did_you_mean(inst, [v for v in value if isinstance(v, str)])
    hint = spelling_hint(schema["x-unit"], inst) if kind == "pattern" and "x-unit" in schema else None
    if hint:  # a unit hpnlab does not take: refused, with the spelling it does
        message += f" ({hint})"
    return [(path, message)]


def _explain_alternatives(error, path):
    keys = _required_alternatives(error.validator_value)
    if keys is not None and isinstance(error.instance, dict):
        # oneOf/anyOf over `required` lists: "exactly one of rate, oversubscription".
        present = [k for k in keys if k in error.instance]
        want = "exactly one of" if error.validator == "oneOf" else "at least one of"
        none = "neither" if len(keys) == 2 else "none of them"
        got = none if not present else "both" if len(present) == len(keys) == 2 else ", ".join(present)
        return [(path, f"expected {want} {_names(keys)}, got {got}")]
    expected = error.schema.get("x-expected") if isinstance(error.schema, dict) else None
    if expected:  # the alternatives in the schema's own words, not the nearest one's
        return [(path, f"expected {expected}, got {_found(error)}")]
    if error.context:
        return _explain(best_match(error.context))
    return [(path, error.message)]


def _required_alternatives(subschemas):
    """The key names if every alternative is just {"required": [one key]}."""
    keys = []
    for sub in subschemas:
        if not (isinstance(sub, dict) and set(sub) == {"required"} and len(sub["required"]) == 1):
            return None
        keys.append(sub["required"][0])
    return keys


def _unknown_field(key, allowed):
    hint = _did_you_mean(str(key), allowed).strip(" ()")
    hint = f"{hint} " if hint else ""
    return f"unknown field {show(key)} ({hint}allowed: {', '.join(allowed)})"


def _did_you_mean(text, choices):
    close = difflib.get_close_matches(text, [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _names(keys):
    return ", ".join(str(k) for k in keys)


_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "nothing",
}


def _expectation(error):
    """What the failing keyword wanted, in words."""
    kind, value, schema = error.validator, error.validator_value, error.schema
    if kind == "type":
        types = value if isinstance(value, list) else [value]
        return " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _bounds(schema)
    if kind == "multipleOf":
        return f"a multiple of {value}"
    if kind == "enum":
        return "one of " + ", ".join(show(v) for v in value)
    if kind == "const":
        return show(value)
    if kind == "minLength":
        return "a non-empty string" if value == 1 else f"a string of at least {value} characters"
    if kind == "maxLength":
        return f"a string of at most {value} characters"
    if kind == "pattern":
        return f"text matching {value}"
    if kind == "minItems":
        return f"a list of at least {count(value, 'item')}"
    if kind == "maxItems":
        return f"a list of at most {count(value, 'item')}"
    if kind == "uniqueItems":
        return "a list without repeats"
    return error.message


def _bounds(schema):
    noun = "an integer" if schema.get("type") == "integer" else "a number"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    parts = []
    for key, sign in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if key in schema:
            parts.append(f"{sign} {schema[key]}")
    return f"{noun} {' and '.join(parts)}"


def _found(error):
    inst = error.instance
    if error.validator == "uniqueItems" and isinstance(inst, list):
        seen = []
        for item in inst:
            if item in seen:
                return f"{show(item)} more than once"
            seen.append(item)
    return describe(inst)
