"""The Vagrantfile's rsync folder carries the whole project and leaves out
only the top-level folders it names. rsync reads an exclude pattern without
a leading "/" as a name anywhere in the tree: "results/" once left out
testbed/results/, and `hpnlab` failed to import in the VM."""

import fnmatch
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {".git", ".venv", ".vagrant", "results", "build"}  # made on the machine, not code


def _excludes():
    text = (ROOT / "Vagrantfile").read_text()
    block = re.search(r"rsync__exclude:\s*\[([^\]]*)\]", text)
    assert block, "the Vagrantfile's synced folder has no rsync__exclude list"
    return re.findall(r'"([^"]+)"', block.group(1))


def _excluded(rel, is_dir, patterns):
    """Whether rsync leaves out `rel` (a path below the folder's root) by
    one of `patterns`: a leading "/" anchors at the root, a trailing "/"
    matches folders only, a pattern without "/" matches a name at any depth."""
    for pat in patterns:
        if pat.endswith("/") and not is_dir:
            continue
        body = pat.strip("/")
        if pat.startswith("/") or "/" in body:
            if fnmatch.fnmatchcase(rel, body):
                return True
        elif fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], body):
            return True
    return False


def _project_paths():
    for top, dirs, files in os.walk(ROOT):
        rel_top = os.path.relpath(top, ROOT)
        if rel_top == ".":
            dirs[:] = [d for d in dirs if d not in LOCAL]
            rel_top = ""
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")]
        for d in dirs:
            yield f"{rel_top}/{d}".lstrip("/"), True
        for f in files:
            yield f"{rel_top}/{f}".lstrip("/"), False


def test_the_synced_folder_carries_every_project_file():
    patterns = _excludes()
    left_out = [rel for rel, is_dir in _project_paths() if _excluded(rel, is_dir, patterns)]
    assert not left_out, f"rsync__exclude {patterns} leaves out {left_out[:5]}"


def test_the_synced_folder_leaves_out_what_the_machine_made():
    patterns = _excludes()
    kept = sorted(d for d in LOCAL if not _excluded(d, True, patterns))
    assert not kept, f"rsync__exclude {patterns} would copy {kept}"
    # ...at the top only: a folder of that name inside the code is code
    assert not _excluded("testbed/results", True, patterns)
