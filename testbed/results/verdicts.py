"""A run's verdict read back from its results dict: PASSED, FAILED or
UNTRUSTWORTHY, and the sentences that say why, for the report, the
terminal and `hpnlab compare`. trust.py decides (trust.assess) and the
runner writes the decision into results.json; this reads it, so that a
report of any run, old ones included, says the same. Results written
before the trust checks existed carry none: nothing judged them, and they
are not believed.
"""

from .trust import WARN


def fidelity_min(results: dict) -> float | None:
    """The lowest fidelity measured (busy egresses and agent ports), or None."""
    return (((results.get("metrics") or {}).get("fidelity")) or {}).get("min")


def failed_checks(results: dict) -> list[dict]:
    """The checks that failed, then the warnings."""
    checks = (results.get("trust") or {}).get("checks") or []
    bad = [c for c in checks if c.get("ok") is False]
    return [c for c in bad if c.get("severity") != WARN] + [c for c in bad if c.get("severity") == WARN]


NO_CHECKS = (
    "These results carry no trust checks (an hpnlab older than the checks wrote "
    "them): nothing in them was judged."
)


def low_fidelity(results: dict) -> bool:
    """True when the run is not to be believed. Results without trust checks
    (older ones) are not believed either: nothing judged them. The runner
    writes the decision twice, as `trustworthy` and in `trust`: either one
    saying no is enough (the exit status of `hpnlab run` reads the former)."""
    trust = results.get("trust")
    return not trust or results.get("trustworthy") is False or trust.get("trustworthy") is False


def reasons(results: dict) -> list[str]:
    """Sentences saying why a run is not trustworthy: each failed check
    names its measurement, then a warning that may explain it."""
    if not results.get("trust"):
        return [NO_CHECKS]
    causes = [f"{c['name']}: {c['reason']}." for c in failed_checks(results) if c.get("reason")]
    return causes or ["The run was marked untrustworthy."]


def verdict(results: dict) -> str:
    """PASSED / FAILED / UNTRUSTWORTHY (the latter never counts as a pass)."""
    if low_fidelity(results):
        return "UNTRUSTWORTHY"
    return "PASSED" if results.get("passed") else "FAILED"
