"""Problems found in topology and scenario files, and the words used to
describe what was found.

Every problem is one line, `FILE: FIELD: message`, where FIELD is a path
into the document such as `traffic[0].dst` or `topology.planes`, and the
message says what was expected and what was found.
"""

import re
from dataclasses import dataclass

TOP = "(top)"  # the FIELD of problems about the document as a whole


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str

    def __str__(self):
        # Always one line, so that output can be grepped and counted.
        text = f"{self.file}: {self.field or TOP}: {self.message}"
        return printable(re.sub(r"\s*\n\s*", " ", text))


# C0 and C1 control characters and DEL: what a terminal acts on (colours,
# cursor moves, a cleared line that hides what came before) instead of
# showing; and the bidirectional overrides and line separators, which make
# text read differently from what it is
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` with every control character shown as an escape (`\\x1b`), so
    that a name or message from a file cannot drive the terminal that
    prints it: no colours, no cursor moves, no line overwritten."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


class ConfigError(Exception):
    """One or more problems in the files given; `problems` lists them all."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def fail(file: object, field: str, message: str) -> ConfigError:
    return ConfigError([Problem(str(file), field, message)])


# --- describing what a file holds ----------------------------------------------


def describe(value: object) -> str:
    """A short phrase for a value found in a file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "an empty value"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return show(value)
    if isinstance(value, dict):
        return "an empty mapping" if not value else "a mapping"
    if isinstance(value, list):
        return "an empty list" if not value else f"a list of {count(len(value), 'item')}"
    return f"a {type(value).__name__} ({value})"


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def seconds(x: float) -> str:
    return f"{x:g}s"
