#!/usr/bin/env python3
"""Write the reference pages of the documentation from what the code
declares, so that they cannot drift from it: the scenario, topology and
results.json fields from their JSON Schemas (descriptions, types, what a
value must look like), the metrics an expectation can bound from the
metric vocabulary, and every command's --help from the argument parser.

    python3 scripts/reference.py           # (re)writes docs/reference/*.md
    python3 scripts/reference.py --check   # exit 1 naming each page that is stale

A unit test runs the check; `make docs` writes the pages and builds the
site with MkDocs in strict mode.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.fabric.vocabulary import (  # noqa: E402
    CLASS_METRICS,
    CONTROLLER_METRICS,
    JOB_METRICS,
    PROBE_METRICS,
    RATIO_METRICS,
    time_unit,
)
from testbed.results.expectations import METRIC_KEYS  # noqa: E402

OUT = ROOT / "docs" / "reference"
SCHEMAS = {
    "scenario": ROOT / "testbed" / "fabric" / "schemas" / "scenario.json",
    "topology": ROOT / "testbed" / "fabric" / "schemas" / "topology.json",
    "results": ROOT / "testbed" / "results" / "schemas" / "results.json",
}
HEADER = "<!-- Written by scripts/reference.py from the code; edit the code, not this page. -->\n\n"


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _inline_object(node: dict) -> dict | None:
    """The object a field holds inline (with fields of its own), if any."""
    for candidate in (node, node.get("then", {}), node.get("items", {})):
        if isinstance(candidate, dict) and "properties" in candidate:
            return candidate
    return None


def _kind(node: dict, defs: dict, here: str) -> str:
    """A short description of what a field takes; `here`: the section a
    field's own inline object is described in."""
    if "$ref" in node:
        ref = node["$ref"]
        if ref.startswith("#/$defs/"):
            name = ref.rsplit("/", 1)[1]
            target = defs.get(name, {})
            if _inline_object(target) is not None:
                return f"[{name}](#{name})"
            return _kind(target, defs, here)
        return "a topology (see [topology.md](topology.md))" if "topology" in ref else ref
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    inline = _inline_object(node)
    if inline is not None and "x-expected" not in node:
        what = "a list of" if node.get("type") == "array" else "a mapping:"
        return f"{what} [{here}](#{here.replace('.', '')})"
    if "x-expected" in node:
        return node["x-expected"]
    t = node.get("type")
    if t == "array":
        items = node.get("items", {})
        return f"a list of {_kind(items, defs, here)}" if items else "a list"
    if isinstance(t, list):
        return " or ".join(t)
    return t or "any"


def _sections(title: str, node: dict, defs: dict, out: list[str]) -> None:
    """A table of `node`'s fields under `title`, then one section per field
    that holds an object of its own."""
    required = set(node.get("required", ()))
    rows = ["| field | takes | what it is |", "|---|---|---|"]
    nested = []
    for name, spec in node.get("properties", {}).items():
        path = name if title == "Top level" else f"{title}.{name}"
        mark = " (required)" if name in required else ""
        ref_name = spec.get("$ref", "").rsplit("/", 1)[-1]
        text = spec.get("description") or defs.get(ref_name, {}).get("description", "")
        rows.append(f"| `{name}`{mark} | {_cell(_kind(spec, defs, path))} | {_cell(text)} |")
        inline = None if "$ref" in spec else _inline_object(spec)
        if inline is not None:
            nested.append((path, inline))
    out += ["", f"## {title}", ""]
    description = node.get("description") if title != "Top level" else None
    if description:
        out += [_cell(description), ""]
    out += rows
    for path, inline in nested:
        _sections(path, inline, defs, out)


def schema_page(kind: str) -> str:
    schema = json.loads(SCHEMAS[kind].read_text())
    defs = schema.get("$defs", {})
    lines = [
        f"# {schema.get('title', kind)}",
        "",
        _cell(schema.get("description", "")),
        "",
        f"The JSON Schema: `{SCHEMAS[kind].relative_to(ROOT)}`.",
    ]
    _sections("Top level", schema, defs, lines)
    for name, spec in defs.items():
        inline = _inline_object(spec)
        if inline is not None:
            _sections(
                name,
                {**inline, "description": spec.get("description") or inline.get("description")},
                defs,
                lines,
            )
    return HEADER + "\n".join(lines) + "\n"


def metrics_page() -> str:
    def unit(m: str) -> str:
        if m in RATIO_METRICS:
            return "ratio (a bound may be written as a percentage)"
        u = time_unit(m)
        return f"time in {u} (a bound may be written as a duration)" if u else "a count or an amount"

    groups = [
        ("Per host (iperf3 flows; name the host)", tuple(METRIC_KEYS)),
        ("The whole run", ("fidelity",)),
        ("Per training job (name the job)", JOB_METRICS),
        ("Per queue class (name the class)", CLASS_METRICS),
        ("After a controller restart", CONTROLLER_METRICS),
        ("Per named fault (probes)", PROBE_METRICS),
    ]
    lines = [
        "# Metrics an expectation can bound",
        "",
        "Every one is measured while the drill runs (see [scenarios.md](../scenarios.md) for",
        "what each means); `min` and `max` are in the unit given here.",
    ]
    for title, names in groups:
        lines += ["", f"## {title}", "", "| metric | unit |", "|---|---|"]
        lines += [f"| `{m}` | {unit(m)} |" for m in names]
    return HEADER + "\n".join(lines) + "\n"


def cli_page() -> str:
    from testbed.cli import build_parser

    parser = build_parser()
    lines = ["# Commands", "", "Every command's `--help`, as `hpnlab` prints it.", ""]
    lines += ["## hpnlab", "", "```text", _help_of(parser).rstrip(), "```"]
    for name, sub in _subcommands(parser):
        lines += ["", f"## hpnlab {name}", "", "```text", _help_of(sub).rstrip(), "```"]
    return HEADER + "\n".join(lines) + "\n"


def _subcommands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + name, sub
                yield from _subcommands(sub, prefix + name + " ")


def _help_of(parser: argparse.ArgumentParser) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        parser.print_help()
    return buf.getvalue()


def scenarios_page() -> str:
    """The shipped scenarios: each one's name, its description's first
    sentence, and the paper figure it names, if any."""
    import re

    import yaml

    lines = [
        "# Shipped scenarios",
        "",
        "Each file in `scenarios/`, with the first sentence of its description",
        "(`hpnlab check` and the file itself say the rest). Run one with",
        "`sudo hpnlab run scenarios/NAME.yaml`; [numbers.md](../numbers.md) has what they measured.",
        "",
        "| scenario | what it shows | paper figure |",
        "|---|---|---|",
    ]
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        text = " ".join(str(yaml.safe_load(path.read_text()).get("description", "")).split())
        first = re.split(r"(?<=[a-z0-9)])\. (?=[A-Z])", text, maxsplit=1)[0].rstrip(".") + "."
        figures = sorted(set(re.findall(r"Fig(?:ure|s)?\.? ?(\d+[a-z]?(?:/\d+[a-z]?)?)", text)))
        lines.append(f"| `{path.stem}` | {_cell(first)} | {', '.join('Fig. ' + f for f in figures)} |")
    return HEADER + "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    return {
        "scenarios.md": scenarios_page(),
        "scenario.md": schema_page("scenario"),
        "topology.md": schema_page("topology"),
        "results.md": schema_page("results"),
        "metrics.md": metrics_page(),
        "cli.md": cli_page(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only say which pages are stale (exit 1 if any)")
    args = p.parse_args(argv)
    stale = []
    for name, text in pages().items():
        path = OUT / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        said = "stale (run: python3 scripts/reference.py)" if args.check else "written"
        print(f"{path.relative_to(ROOT)}: {said}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
