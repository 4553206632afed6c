"""What the queues did, summed per class (pure): the numbers queue
expectations are judged on, all measured from the engine's counters."""


def class_totals(queues: dict) -> dict:
    """Per class: drops, marks and sent bytes over all ports, and the largest
    max and p99 backlog of any one port (the bottleneck)."""
    out: dict = {}
    for by_class in (queues or {}).get("ports", {}).values():
        for name, e in by_class.items():
            t = out.setdefault(
                name,
                {"drops": 0, "marks": 0, "sent_bytes": 0, "max_backlog_bytes": 0, "p99_backlog_bytes": 0.0},
            )
            t["drops"] += e["drops"]
            t["marks"] += e["marks"]
            t["sent_bytes"] += e["sent_bytes"]
            t["max_backlog_bytes"] = max(t["max_backlog_bytes"], e["max_backlog_bytes"])
            t["p99_backlog_bytes"] = max(t["p99_backlog_bytes"], e["p99_backlog_bytes"])
    return out


def class_drops(queues: dict) -> dict:
    """{"ifname egress, class c": packets the class dropped} for every class
    that dropped any: loss the emulated network accounts for (the engine
    drops in BPF, before HTB, so the qdisc counters never see it)."""
    return {
        f"{ifname} egress, class {name}": e["drops"]
        for ifname, by_class in (queues or {}).get("ports", {}).items()
        for name, e in by_class.items()
        if e["drops"]
    }


def to_emulated(queues: dict | None, n: float) -> dict | None:
    """The queue record with its sample times in emulated time (bytes and
    counts are the same under time dilation)."""
    if not queues or n == 1:
        return queues
    out = dict(queues, sample_hz=round(queues["sample_hz"] * n, 1))
    out["series"] = dict(queues["series"], t=[round(t / n, 4) for t in queues["series"]["t"]])
    return out
