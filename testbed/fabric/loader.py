"""Reading YAML strictly: duplicate keys are an error, and every failure is
one Problem with the position in the file."""
from pathlib import Path

import yaml

from .problems import TOP, describe, fail

SCENARIO, TOPOLOGY = "scenario", "topology"


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are allowed to be overridden
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_message(err):
    """A one-line description of a YAML parse error, with its position."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"invalid YAML: {err}"
    mark = err.problem_mark
    text = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    if err.context and err.context_mark is not None:
        text += f" ({err.context} started at line {err.context_mark.line + 1})"
    return text


def load_yaml(path):
    """The mapping in the YAML file `path`; ConfigError with one problem if not."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(name, TOP, "file not found") from None
    except IsADirectoryError:
        raise fail(name, TOP, "is a directory, expected a YAML file") from None
    except UnicodeDecodeError as e:
        raise fail(name, TOP, f"not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise fail(name, TOP, f"cannot read the file: {e.strerror or e}") from None
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise fail(name, TOP, _yaml_message(e)) from None
    if doc is None:
        raise fail(name, TOP, "the file is empty, expected a mapping of fields")
    if not isinstance(doc, dict):
        raise fail(name, TOP, f"expected a mapping of fields at the top level, got {describe(doc)}")
    return doc


def detect_kind(doc):
    """'scenario' for a mapping with a `topology` key, else 'topology'."""
    return SCENARIO if isinstance(doc, dict) and TOPOLOGY in doc else TOPOLOGY
