"""A lab's files copied into a student's folder, the student's numbers
written in where they carry {{placeholders}} (params.fill). Root may run
this in a folder a student controls: nothing is written through a link."""

from __future__ import annotations

import os
from pathlib import Path

from .params import fill


def write_text(path: str, text: str) -> None:
    """Replace `path` with a new file holding `text`: whatever had the name
    (a link, symbolic or hard, to some other file) loses it and is never
    written through."""
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def copy_filled(source: Path, folder: str, values: dict[str, float], replace: bool) -> list[str]:
    """Copy every file of `source` into `folder` with `values` filled in;
    a file already there is kept unless `replace`. The names copied."""
    copied = []
    for entry in sorted(source.iterdir()):
        target = os.path.join(folder, entry.name)
        if os.path.lexists(target) and not replace:
            continue
        write_text(target, fill(entry.read_text(encoding="utf-8"), values))
        copied.append(entry.name)
    return copied
