"""Parsing of rates and durations written in real units ("400Gbit", "2ms"),
and the accepted spelling of a near miss ("40 Gbit/s": "40Gbit"), which a
file is refused with, never silently read as."""

import math
import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kMGT]?)(bit|bps|b/s)?\s*$")
_RATE_MULT = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
# Minutes and hours too: a long drill is written '2min' (or '2m', as
# systemd and Go write it) rather than '120s'.
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s|min|m|h)\s*$")
_TIME_MULT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}

RATE_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*[kMGT]?(bit|bps|b/s)\s*$"
TIME_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*(us|ms|s|min|m|h)\s*$"
PERCENT_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*%\s*$"
# The longest rate, time or size a file may write: a number of this many
# characters stays finite in every unit ('9' * 30 + 'TB' is 1e42 bytes).
MAX_UNIT_TEXT = 32


def _finite(value, text, what):
    if not math.isfinite(value):
        raise ValueError(f"{what} too large: {text!r}")
    return value


def parse_rate(text: str | float) -> float:
    """'400Gbit' -> 4e11 (bit/s). Raises ValueError on anything else."""
    m = _RATE.match(str(text))
    if not m or not m.group(3):
        raise ValueError(f"not a rate: {text!r} (expected e.g. '200Gbit', '40Mbit')")
    return _finite(float(m.group(1)) * _RATE_MULT[m.group(2)], text, "rate")


def _bare_number(text):
    return isinstance(text, (int, float)) and not isinstance(text, bool)


def parse_time(text: str | float) -> float:
    """'2ms' -> 0.002 (seconds); a bare number is taken as seconds."""
    if _bare_number(text):
        return _finite(float(text), text, "duration")
    m = _TIME.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (expected e.g. '2ms', '1.5s', '2min')")
    return _finite(float(m.group(1)) * _TIME_MULT[m.group(2)], text, "duration")


def is_percent(text: object) -> bool:
    return isinstance(text, str) and re.match(PERCENT_PATTERN, text) is not None


def parse_bound(text: str | float, unit: str = "") -> float:
    """An expectation's bound as a number in the metric's own unit: a bare
    number as written, '45%' as 0.45, a duration in seconds (`unit` 's')
    or milliseconds ('ms'). Which spelling fits which metric is the
    scenario check's business (semantics_expect); this only converts."""
    if _bare_number(text):
        return _finite(float(text), text, "bound")
    if is_percent(text):
        return _finite(float(str(text).strip().rstrip("%")) / 100, text, "bound")
    return parse_time(text) / (1e-3 if unit == "ms" else 1.0)


def format_rate(bps: float) -> str:
    for unit, mult in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= mult:
            return f"{bps / mult:g}{unit}"
    return f"{bps:g}bit"


def format_time(s: float) -> str:
    for unit, mult in (("s", 1.0), ("ms", 1e-3)):
        if s >= mult or s == 0:
            return f"{s / mult:g}{unit}"
    return f"{s / 1e-6:g}us"


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKMGT]?)(i?)B\s*$")
_SIZE_MULT = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
SIZE_PATTERN = r"^\s*[0-9]*\.?[0-9]+\s*[kKMGT]?i?B\s*$"


def parse_bytes(text: str | float) -> float:
    """'5.5GB' -> 5.5e9, '4MiB' -> 4194304, a bare number is bytes."""
    if _bare_number(text):
        return _finite(float(text), text, "size")
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (expected e.g. '550MB', '4MiB')")
    unit, binary = m.group(2), m.group(3)
    if binary:
        return _finite(float(m.group(1)) * 1024 ** " KMGT".index(unit.upper() or " "), text, "size")
    return _finite(float(m.group(1)) * _SIZE_MULT[unit], text, "size")


def format_size(nbytes: float) -> str:
    for unit, mult in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= mult:
            return f"{nbytes / mult:g}{unit}"
    return f"{nbytes:g}B"


# --- near misses ----------------------------------------------------------------
# Spellings hpnlab does not take, read only to say what to write instead:
# a prefix in any case ('m' as tc's mbit: mega, nobody means millibits),
# binary prefixes, bits or bytes, per second or not, and time words.

_NUMBER_WORD = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(.*?)\s*$")
_PREFIXED = re.compile(r"^([kKmMgGtT]?)(i?)\s*(.*)$")
_PER_SECOND = re.compile(r"(ps|/s|/sec|/second|\s*per\s*second)$", re.IGNORECASE)
_BITS, _BYTES = "bits", "bytes"
_TIME_WORDS = {
    1.0: ("s", "sec", "secs", "second", "seconds"),
    1e-3: ("ms", "msec", "msecs", "millisecond", "milliseconds"),
    1e-6: ("us", "\u00b5s", "\u03bcs", "usec", "usecs", "microsecond", "microseconds"),
    1e-9: ("ns", "nsec", "nsecs", "nanosecond", "nanoseconds"),
    60.0: ("mins", "minute", "minutes"),
    3600.0: ("hr", "hrs", "hour", "hours"),
}


def spelling_hint(kind: str, text: object) -> str | None:
    """What to write instead of `text`, a near miss of a 'rate', 'time',
    'size' or 'amount' (a size or a time), as a phrase for the message that
    refuses it ("did you mean '40Gbit'?"); None when it is no near miss."""
    if not isinstance(text, str) or len(text) > MAX_UNIT_TEXT:
        return None
    if kind == "amount":
        return _time_hint(text) or _size_hint(text)
    return {"rate": _rate_hint, "time": _time_hint, "size": _size_hint}[kind](text)


def _prefixed(text):
    """(number, prefix letter in upper case, binary?, unit word) or None."""
    m = _NUMBER_WORD.match(text)
    if not m:
        return None
    prefix, binary, word = _PREFIXED.match(m.group(2)).groups()
    return float(m.group(1)), prefix.upper(), bool(binary), word


def _multiplier(prefix, binary):
    return (1024 if binary else 1000) ** " KMGT".index(prefix or " ")


def _amount_of(word):
    """_BITS, _BYTES or None for a unit word: B is a byte, b a bit, and the
    words in any case."""
    if word.lower() in ("bit", "bits") or word == "b":
        return _BITS
    if word.lower() in ("byte", "bytes") or word == "B":
        return _BYTES
    return None


def _rate_hint(text):
    q = _prefixed(text)
    if q is None:
        return None
    number, prefix, binary, word = q
    unit = _PER_SECOND.sub("", word)
    amount = _amount_of(unit) if unit else (_BITS if prefix else None)  # '200G': bits
    if amount is None:
        return None
    canonical = format_rate(number * _multiplier(prefix, binary) * (8 if amount == _BYTES else 1))
    if amount == _BYTES:
        return f"rates are in bits per second: did you mean {canonical!r}?"
    return f"did you mean {canonical!r}?"


def _time_hint(text):
    m = _NUMBER_WORD.match(text)
    if not m:
        return None
    word = m.group(2)
    for mult, words in _TIME_WORDS.items():
        if word in words or word.lower() in words:
            return f"did you mean {format_time(float(m.group(1)) * mult)!r}?"
    return None


def _size_hint(text):
    q = _prefixed(text)
    if q is None:
        return None
    number, prefix, binary, word = q
    amount = _amount_of(word) if word else (_BYTES if prefix else None)  # '550M': bytes
    if amount is None:
        return None
    nbytes = number * _multiplier(prefix, binary)
    if amount == _BITS and word != "b":  # '550Mbit': a size in bits
        return f"sizes are in bytes: did you mean {format_size(nbytes / 8)!r}?"
    return f"did you mean {f'{number:g}{prefix}iB' if binary else format_size(nbytes)!r}?"
