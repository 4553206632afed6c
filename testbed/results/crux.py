"""What Crux did as it ran (pure): every decision of the running schedule
and, per job, what was declared beside what its traffic showed, from the
controller's `crux` and `crux_profile` events. In this machine's time, as
measured; results/dilation.py brings it to emulated time with the rest."""


def record(events: list, t0: float) -> dict | None:
    """{"decisions": [{"at", "why", "levels"}], "jobs": {job: {"declared",
    "measured", "ratio", "unseen"}}}; None when Crux did not run measured."""
    decisions = [
        {"at": round(e["t"] - t0, 4), "why": e["why"], "levels": e["levels"]}
        for e in events
        if e["event"] == "crux"
    ]
    jobs = {
        e["job"]: {k: e.get(k) for k in ("declared", "measured", "ratio", "unseen")}
        for e in events
        if e["event"] == "crux_profile"
    }
    if not decisions and not jobs:
        return None
    return {"decisions": decisions, "jobs": jobs}
