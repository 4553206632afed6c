"""Reading YAML strictly: duplicate keys are an error, and every failure is
one Problem with the position in the file.

Files come from course repositories and colleagues, so reading one must not
be able to hang or exhaust the machine: only regular files of at most
MAX_FILE_BYTES are read, aliases (the `*name` references that let a few
hundred bytes expand into gigabytes) are refused, and so is nesting deeper
than MAX_DEPTH (the composer recurses per level).
"""

import os
import stat
from os import PathLike

import yaml

from .problems import TOP, describe, fail

SCENARIO, TOPOLOGY = "scenario", "topology"
MAX_FILE_BYTES = 1 << 20  # 1 MiB: the largest shipped file is a few KB
MAX_DEPTH = 32  # nested mappings and lists; the schemas need 6
# Digits of one number: Python refuses to convert integers of more than 4300
# digits, a base-60 one ('1:59:59...') of a megabyte takes it minutes, and
# one of 400 digits is too large for a float (the shipped files need 10).
MAX_NUMBER_CHARS = 32


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last,
    aliases, nesting deeper than MAX_DEPTH and numbers longer than
    MAX_NUMBER_CHARS."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases (*{event.anchor}) are not allowed: write the value out",
                event.start_mark,
            )
        if self._depth >= MAX_DEPTH:
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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
                    "while reading a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_number(self, node):
        """An int or a float, refused before conversion when longer than
        MAX_NUMBER_CHARS."""
        if len(node.value) > MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"a number of {len(node.value)} characters, expected at most {MAX_NUMBER_CHARS}",
                node.start_mark,
            )
        if node.tag.endswith(":int"):
            return self.construct_yaml_int(node)
        return self.construct_yaml_float(node)


for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
    _StrictLoader.add_constructor(_tag, _StrictLoader.construct_number)


def _yaml_message(err):
    """A one-line description of a YAML parse error, with its position."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"invalid YAML: {err}"
    mark = err.problem_mark
    text = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    if err.context and err.context_mark is not None:
        text += f" ({err.context} started at line {err.context_mark.line + 1})"
    return text


def kind_of(value: object) -> str:
    """'a list', 'a string', ...: what a value is, without what it says."""
    if value is None or isinstance(value, (dict, list)):
        return describe(value)
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


def load_yaml(path: str | PathLike, within: str | PathLike | None = None) -> dict:
    """The mapping in the YAML file `path`; ConfigError with one problem if
    not. `within(real_path)`: whether the file, as opened, may be read (it
    is asked of the open file, so a link swapped in after a check on the
    name changes nothing)."""
    name = str(path)
    text = _read_text(name, within)
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise fail(name, TOP, _yaml_message(e)) from None
    if doc is None:
        raise fail(name, TOP, "the file is empty, expected a mapping of fields")
    if not isinstance(doc, dict):
        # the kind of value only: a file that is not ours (a scenario may name
        # any path) must not have its content echoed
        raise fail(name, TOP, f"expected a mapping of fields at the top level, got {kind_of(doc)}")
    return doc


def _read_text(name, within=None):
    """The file's text, refused when it is not a regular file, is larger than
    MAX_FILE_BYTES or is not UTF-8 (a FIFO or /dev/zero must not hang us:
    it is opened without blocking and looked at once open), or when
    `within` refuses where it really is."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise fail(name, TOP, "file not found") from None
    except OSError as e:
        raise fail(name, TOP, f"cannot read the file: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if within is not None and not within(os.readlink(f"/proc/self/fd/{fd}")):
            raise fail(name, TOP, "is not where it may be read from (it moved while hpnlab looked at it)")
        if stat.S_ISDIR(info.st_mode):
            raise fail(name, TOP, "is a directory, expected a YAML file")
        if not stat.S_ISREG(info.st_mode):
            raise fail(name, TOP, "is not a regular file, expected a YAML file")
        if info.st_size > MAX_FILE_BYTES:
            raise fail(name, TOP, f"is {info.st_size} bytes, expected at most {MAX_FILE_BYTES}")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as e:
        raise fail(name, TOP, f"cannot read the file: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew while we looked
        raise fail(name, TOP, f"is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(name, TOP, f"not UTF-8 text (bad byte at offset {e.start})") from None


def detect_kind(doc: object) -> str:
    """'scenario' for a mapping with a `topology` key, else 'topology'."""
    return SCENARIO if isinstance(doc, dict) and TOPOLOGY in doc else TOPOLOGY
