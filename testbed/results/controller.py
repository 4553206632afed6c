"""What became of the controller during a drill (pure): when it exited,
whether the scenario asked for that, how long the fabric ran without one,
and what each restart did, from the controller's own events."""

ROUTES_AFTER_START_LIMIT_S = 30.0  # a restart whose routes never stood within this is "never"


def record(events: list, t0: float, actions: list, ran_s: float, dilation: float = 1.0) -> dict:
    """{"exits": [...], "restarts": [...], "without_s": float, "unplanned": [...],
    "host_routes_at_end": {host: {destination: [ports]}}} in emulated time.
    `events`: the controller's events (monotonic "t");
    `actions`: the timeline's stop/start entries as applied (applied_at,
    drill seconds)."""
    n = float(dilation)

    def at(t):
        return round((t - t0) / n, 4)

    exits = [
        {"at": at(e["t"]), "code": e.get("code"), "asked": bool(e.get("asked"))}
        for e in events
        if e["event"] == "exit" and 0 <= e["t"] - t0 <= ran_s
    ]
    restarts = []
    for a in actions:
        if a["action"] != "start":
            continue
        since = t0 + a["applied_at"]
        later = [e for e in events if e["t"] >= since]
        routes = next((e for e in later if e["event"] == "routes"), None)
        adopted = [e for e in later if e["event"] == "adopted" and (routes is None or e["t"] <= routes["t"])]
        entry = {
            "at": round(a["applied_at"] / n, 4),
            "s": None,
            "changes": None,
            "adopted_routes": sum(e.get("routes", 0) for e in adopted),
            "removed": sum(e.get("removed", 0) for e in adopted),
        }
        if routes is not None and routes["t"] - since <= ROUTES_AFTER_START_LIMIT_S:
            entry["s"] = round((routes["t"] - since) / n, 4)
            entry["changes"] = routes.get("changes")
        restarts.append(entry)
    routes = [e for e in events if e["event"] == "routes" and e["t"] - t0 <= ran_s]
    return {
        "exits": exits,
        "restarts": restarts,
        "without_s": _without_s(exits, restarts, ran_s / n),
        "unplanned": [e for e in exits if not e["asked"]],
        # The ports the hosts were held to when the traffic ended: after a
        # fault is repaired, none should be (None: no routes came at all).
        "host_routes_at_end": routes[-1].get("host_overrides", {}) if routes else None,
    }


def _without_s(exits, restarts, end):
    """Seconds from each exit to the next start (or the end of the run)."""
    total = 0.0
    starts = sorted(r["at"] for r in restarts)
    for e in exits:
        nxt = next((s for s in starts if s >= e["at"]), end)
        total += max(0.0, min(nxt, end) - e["at"])
    return round(total, 4)


def problems(rec: dict) -> list[str]:
    """An exit the scenario did not ask for means the run was not what it
    planned: the fabric went on with the last routes it had, and nothing
    rerouted around a fault from then on."""
    return [
        f"the controller exited at {e['at']:.2f} s (status {e['code']}) without the "
        f"scenario asking: from then on the switches kept their last routes and "
        f"nothing rerouted"
        for e in rec["unplanned"]
    ]
