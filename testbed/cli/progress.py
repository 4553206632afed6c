"""What a long command shows while it works.

Called with a line, it prints the line, as `print` would. In a terminal it
also keeps a progress bar (tqdm) on the bottom line, under the lines: which
phase the run is in (bring-up, traffic, teardown, the report) and, for the
traffic, the emulated seconds played out of the drill's and what remains;
bring-up, teardown and the report, whose length is not known beforehand,
show the seconds they have taken so far. Anywhere else (a pipe, a log
file, CI) there is no bar: the lines alone, as they come, so that a log
reads the same as before.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from tqdm import tqdm

from testbed.fabric.problems import printable

TIMED = "{desc} {elapsed}"
MEASURED = "{desc} {bar} {n:.1f}/{total:.0f} s{postfix}"


class Progress:
    def __init__(self, stream: TextIO | None = None, bar: bool | None = None):
        self.stream = stream or sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.shows_bar = bool(isatty and isatty()) if bar is None else bar
        self._bar: tqdm | None = None

    def __call__(self, line: str) -> None:
        """Print one line (above the bar, when there is one)."""
        if self._bar is not None:
            self._bar.clear()
            print(line, file=self.stream, flush=True)
            self._bar.refresh()
        else:
            print(line, file=self.stream, flush=True)

    def phase(self, name: str | None, total: float | None = None) -> None:
        """The run entered phase `name` (None: it is over), `total` seconds
        long when known."""
        self.close()
        if name is None or not self.shows_bar:
            return
        self._bar = tqdm(
            total=total,
            desc=printable(name),
            file=self.stream,
            leave=False,
            ncols=self._width(),
            bar_format=MEASURED if total else TIMED,
            mininterval=0.2,
        )

    def _width(self) -> int:
        """The terminal's width (80 where it does not say: a new pty)."""
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (OSError, AttributeError, ValueError):
            return 80

    def at(self, done: float) -> None:
        """The measured phase has done `done` of its total."""
        bar = self._bar
        if bar is None or not bar.total:
            return
        bar.n = min(done, bar.total)
        bar.set_postfix_str(f"emulated, {max(bar.total - done, 0):.0f} s to go", refresh=False)
        bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
