"""Numbers and tables as text, shared by the Markdown report, the trust
verdict's sentences and the side-by-side comparison."""

import math
import re

from testbed.fabric.problems import printable

# What starts Markdown (or HTML) markup within a line: emphasis, code, links
# and images, tags, strike-through, escapes, a heading. The text is made one
# line first, so list markers and tables cannot form; a table cell's pipes
# are md_table's to escape.
_MARKUP = re.compile(r"([\\`*_\[\]<>#!~])")


def md_text(text: object) -> str:
    """Text from a file (a description, an expectation's name, a path)
    made to show in Markdown as written: markup characters escaped, control
    characters shown as escapes, one line. A file cannot make summary.md
    say PASSED in bold, link elsewhere or embed HTML."""
    text = _MARKUP.sub(r"\\\1", printable(" ".join(str(text).split())))
    # a leading list marker ('- ', '+ ', '1. ') would start a list
    return re.sub(r"^([-+]|\d+[.)])(?=\s)", r"\\\1", text)


def fmt(x: object, unit: str = "") -> str:
    """A number for humans: 3 significant digits, no exponent for big rates,
    '-' for no value."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if not math.isfinite(x):
        return "-"
    text = f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{text}{unit}"


def listed(items: list, most: int = 8) -> str:
    """'a, b, c' for up to `most` items, then ', and N more': a note that
    names what a 128-host fabric has by the hundred stays one readable line."""
    extra = len(items) - most
    return ", ".join(str(i) for i in items[:most]) + (f", and {extra} more" if extra > 0 else "")


def _cell(x):
    """Markdown table cell: no pipes or newlines may leak into the layout."""
    text = x if isinstance(x, str) else fmt(x)
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def text_table(header: list, rows: list) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(row):
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def count(x: object) -> object:
    """Fabric sizes may come as counts or as lists of names."""
    if isinstance(x, (list, tuple, dict)):
        return len(x)
    return x


def mb(nbytes: float | None) -> float | None:
    """Bytes as MB (10^6), 2 decimals; None stays None."""
    return None if nbytes is None else round(nbytes / 1e6, 2)


def terminal_text(markdown: str) -> str:
    """Markdown as the terminal shows hpnlab's other reports: headings as
    plain lines, each table as aligned columns (text_table), bold and
    code marks dropped; the rest as written (pure)."""
    out: list[str] = []
    table: list[list[str]] = []

    def cells(line: str) -> list[str]:
        return [c.strip().replace("`", "").replace("**", "") for c in line.strip().strip("|").split("|")]

    def flush() -> None:
        if table:
            rows = [r for r in table[1:] if not all(set(c) <= set("-: ") for c in r)]
            out.append(text_table(table[0], rows))
            table.clear()

    for line in markdown.splitlines():
        if line.lstrip().startswith("|"):
            table.append(cells(line))
            continue
        flush()
        out.append(
            line.lstrip("#").strip() if line.startswith("#") else line.replace("**", "").replace("`", "")
        )
    flush()
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")
