"""A drill's results on disk: results.json and summary.md written atomically,
and read back (for `hpnlab compare`). The runner assembles the results
dict; this module only stores it, as strict JSON."""

import dataclasses
import json
import math
import os
import tempfile
from importlib import resources
from typing import Any

import jsonschema

from .markdown import render_summary

RESULTS_JSON, SUMMARY_MD = "results.json", "summary.md"


def atomic_write(path: str, data: str | bytes) -> None:
    """Write `data` (str or bytes) so readers never see a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    if isinstance(data, str):
        data = data.encode("utf-8")
    # The temp file lives in the target directory: os.replace is only atomic
    # within one filesystem.
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def jsonable(obj: object) -> object:
    """`obj` as plain JSON data: dataclasses and tuples unpacked, NaN and
    infinities turned into None (strict JSON has no spelling for them)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def write_results(out_dir: str, results: dict) -> dict[str, str]:
    """Write results.json and summary.md into `out_dir`; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    data: Any = jsonable(results)
    paths = {"results": os.path.join(out_dir, RESULTS_JSON), "summary": os.path.join(out_dir, SUMMARY_MD)}
    atomic_write(paths["results"], json.dumps(data, indent=2, allow_nan=False) + "\n")
    atomic_write(paths["summary"], render_summary(data))
    return paths


# A drill's results.json is well under a megabyte (series at 10 Hz); a
# file many times that size did not come from hpnlab.
MAX_RESULTS_BYTES = 64 << 20


def load_results(path: str) -> dict:
    """Read a results.json, given the file or the run directory holding it
    (ValueError when it is too large to be one)."""
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_JSON)
    with open(path, "rb") as fh:
        data = fh.read(MAX_RESULTS_BYTES + 1)
    if len(data) > MAX_RESULTS_BYTES:
        raise ValueError(f"larger than {MAX_RESULTS_BYTES >> 20} MiB, not an hpnlab results.json")
    return json.loads(data)


def results_schema() -> dict:
    """results.json's JSON Schema (testbed/results/schemas/results.json):
    the public shape of a drill's results."""
    text = (
        resources.files(__package__).joinpath("schemas").joinpath("results.json").read_text(encoding="utf-8")
    )
    return json.loads(text)


def shape_problems(results: dict) -> list[str]:
    """Where `results` (a dict as results.json holds it) departs from the
    schema, one line each with its path; empty when it fits."""
    validator = jsonschema.Draft202012Validator(results_schema())
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in sorted(validator.iter_errors(results), key=lambda e: list(map(str, e.absolute_path)))
    ]
