"""Parsing of rates and durations written in real units ("400Gbit", "2ms")."""
import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kMGT]?)(bit|bps|b/s)?\s*$")
_RATE_MULT = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)\s*$")
_TIME_MULT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}

RATE_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*[kMGT]?(bit|bps|b/s)\s*$"
TIME_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*(us|ms|s)\s*$"


def parse_rate(text):
    """'400Gbit' -> 4e11 (bit/s). Raises ValueError on anything else."""
    m = _RATE.match(str(text))
    if not m or not m.group(3):
        raise ValueError(f"not a rate: {text!r} (expected e.g. '200Gbit', '40Mbit')")
    return float(m.group(1)) * _RATE_MULT[m.group(2)]


def _bare_number(text):
    return isinstance(text, (int, float)) and not isinstance(text, bool)


def parse_time(text):
    """'2ms' -> 0.002 (seconds); a bare number is taken as seconds."""
    if _bare_number(text):
        return float(text)
    m = _TIME.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (expected e.g. '2ms', '1.5s')")
    return float(m.group(1)) * _TIME_MULT[m.group(2)]


def format_rate(bps):
    for unit, mult in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= mult:
            return f"{bps / mult:g}{unit}"
    return f"{bps:g}bit"


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKMGT]?)(i?)B\s*$")
_SIZE_MULT = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
SIZE_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*[kKMGT]?i?B\s*$"


def parse_bytes(text):
    """'5.5GB' -> 5.5e9, '4MiB' -> 4194304, a bare number is bytes."""
    if _bare_number(text):
        return float(text)
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (expected e.g. '550MB', '4MiB')")
    unit, binary = m.group(2), m.group(3)
    if binary:
        return float(m.group(1)) * 1024 ** " KMGT".index(unit.upper() or " ")
    return float(m.group(1)) * _SIZE_MULT[unit]
