"""What the sampled queue counters say (pure): per-egress fidelity over the
intervals a port had packets waiting, packets the modeled queues dropped,
bytes over the DC interconnect, and host CPU.

Samples are (t, {dev: (bytes sent, backlog bytes, drops)}) as the drill's
sampler takes them, 10 per second. An egress is *busy* over a sample
interval that starts with packets waiting in its queue. A shaper that
delivers its rate sends, within the interval, what was waiting at its
start, up to what its rate allows in the interval (FIFO: later arrivals
queue behind those bytes). That is the port's debt for the interval;
delivered / owed over its busy intervals is the emulation's fidelity on
that egress (1.0 = the emulator kept every promise the link made). The
bound holds however bursty the traffic, so every egress that was busy for
at least 1 s in all is judged, switch ports and host ports alike, each on
its own.
"""

from collections.abc import Iterable

from testbed.fabric.model import Fabric

BUSY_MIN_SAMPLES = 10  # an egress must be busy for >= 1 s in all to be judged
# Sample stamps are taken once all counters are read, a few ms after the
# switch ports' counters were: the interval a port really had is up to
# that much shorter than the stamps say, so its debt allows for it.
STAMP_SLACK = 0.05


def fidelity(
    samples: list,
    configured_mbit: dict,
    names: dict,
    owners: dict | None = None,
    skip: dict | None = None,
    frame_bytes: int = 0,
    shares: dict | None = None,
) -> dict:
    """Per egress device busy long enough: its configured rate, the rate it
    sent at while busy, the seconds it was busy and its fidelity (bytes
    delivered / bytes owed, see the module's docstring).

    `configured_mbit` and `names` map device -> rate and device -> link name;
    `owners` maps device -> (node, is a switch); `skip` maps device ->
    [(start, end)] of drill time whose intervals are not judged (a link
    going down empties its queue without sending it); `frame_bytes` is the
    largest frame, which a shaper may still be waiting to send when an
    interval ends; `shares` maps device -> [(time, share of its rate)] of
    the link-degrades and restores (rate_shares): a degraded port owes its
    cut rate, not the configured one."""
    owners, skip, shares = owners or {}, skip or {}, shares or {}
    out = {}
    for dev, rate in configured_mbit.items():
        busy_n, busy_s, sent_busy, owed_sum, delivered_sum = 0, 0.0, 0, 0.0, 0.0
        for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
            if dev not in ca or dev not in cb or tb <= ta:
                continue
            if any(ta < end and tb > start for start, end in skip.get(dev, ())):
                continue
            (bytes_a, backlog_a, _), (bytes_b, _, _) = ca[dev], cb[dev]
            if backlog_a <= 0:
                continue
            room = (
                rate * share_at(shares.get(dev, ()), ta) * 1e6 / 8 * (tb - ta) * (1 - STAMP_SLACK)
                - frame_bytes
            )
            owed = min(backlog_a, max(room, 0.0))
            sent = bytes_b - bytes_a
            busy_n += 1
            busy_s += tb - ta
            sent_busy += sent
            owed_sum += owed
            delivered_sum += min(sent, owed)
        if busy_n < BUSY_MIN_SAMPLES or busy_s <= 0:
            continue
        node, is_switch = owners.get(dev, (None, None))
        out[f"{names[dev]} ({dev} egress)"] = {
            "configured_mbit": rate,
            "achieved_mbit": sent_busy * 8 / busy_s / 1e6,
            "fidelity": delivered_sum / owed_sum if owed_sum > 0 else None,
            "busy_s": round(busy_s, 3),
            "node": node,
            "switch": is_switch,
        }
    return out


def egress_rates(fabric: Fabric) -> tuple[dict, dict]:
    """({egress dev: configured Mbit/s}, {egress dev: link name})."""
    rates, names = {}, {}
    for link in fabric.links:
        for end in (link.a, link.b):
            rates[end.ifname] = fabric.scaled_mbit(link)
            names[end.ifname] = link.name
    return rates, names


def egress_owners(fabric: Fabric) -> dict:
    """{egress dev: (node it leaves, whether that node is a switch)}."""
    return {
        end.ifname: (end.node, fabric.nodes[end.node].is_switch)
        for link in fabric.links
        for end in (link.a, link.b)
    }


def fault_edges(fabric: Fabric, faults: list, settle_s: float) -> dict:
    """{egress dev: [(start, end)]}: for both ends of every link a fault
    pulled or replugged, settle_s either side of the fault (the queue there
    is flushed when the link goes down, not sent; the fault's stamp is
    taken once the command returned, a little after the cable moved)."""
    out: dict = {}
    for f in faults:
        t = f.get("applied_at")
        t = f["at"] if t is None else t
        link = fabric.links_between(*f["link"])[f.get("index") or 0]
        for end in (link.a, link.b):
            out.setdefault(end.ifname, []).append((t - settle_s, t + settle_s))
    return out


def rate_shares(fabric: Fabric, faults: list) -> dict:
    """{egress dev: [(time applied, share of the link's rate)]} of both ends
    of every link a link-degrade or link-restore changed, in time order."""
    out: dict = {}
    for f in sorted(faults, key=lambda f: f["applied_at"]):
        if f["action"] in ("link-degrade", "link-restore"):
            link = fabric.links_between(*f["link"])[f.get("index") or 0]
            for end in (link.a, link.b):
                out.setdefault(end.ifname, []).append((f["applied_at"], f.get("rate", 1.0)))
    return out


def share_at(changes, t: float) -> float:
    """The share of its rate a port had at time `t` (1 before any change)."""
    share = 1.0
    for since, value in changes:
        if since > t:
            break
        share = value
    return share


def cpu_summary(cpu: list, saturated: float = 0.95) -> dict:
    """Host CPU over the run: mean busy fraction and the share of 0.1 s
    samples in which every core was (nearly) busy: an emulator at 100% CPU
    delays packets and its numbers stop meaning what they say."""
    if not cpu:
        return {"mean_busy": None, "saturated_share": None}
    busy = [b for _, b in cpu]
    return {
        "mean_busy": round(sum(busy) / len(busy), 3),
        "saturated_share": round(sum(1 for b in busy if b >= saturated) / len(busy), 3),
    }


def port_series(samples: list, devs: Iterable[str], n: int, interval: float) -> dict[str, list[float | None]]:
    """{dev: Mbit/s its egress sent in each of `n` intervals of the run},
    from consecutive samples: the rate between two samples fills every
    interval that ends between them (at least the one the later sample
    ends, as the flows' series do), so a sampler slower than the intervals
    (a loaded machine, a time-dilated run) leaves no empty ones between its
    samples; None where no sample covers an interval."""
    out: dict[str, list[float | None]] = {dev: [None] * n for dev in devs}
    for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
        last = int(round(tb / interval)) - 1
        first = min(int(round(ta / interval)), last)
        span = range(max(first, 0), min(last, n - 1) + 1)
        if not span or tb <= ta:
            continue
        for dev, values in out.items():
            if dev in ca and dev in cb:
                rate = round((cb[dev][0] - ca[dev][0]) * 8 / (tb - ta) / 1e6, 3)
                for i in span:
                    values[i] = rate
    return out


def egress_bytes(
    samples: list, devs: Iterable[str], start: float | None = None, end: float | None = None
) -> dict:
    """{dev: bytes its egress sent} for each of `devs` the samples hold,
    over the whole run or between the samples that bracket [start, end]."""
    if not samples:
        return {}
    if start is not None:
        before = [s for s in samples if s[0] <= start] or samples[:1]
        after = [s for s in samples if s[0] >= end] or samples[-1:]
        samples = [before[-1], after[0]]
    if len(samples) < 2:
        return {}
    first, last = samples[0][1], samples[-1][1]
    return {d: last[d][0] - first[d][0] for d in devs if d in first and d in last}


def link_bytes(fabric: Fabric, samples: list) -> dict:
    """{link name: bytes it carried over the run, both directions}, from the
    egress counters of its ends that the samples hold (a host's end is not
    sampled: a link to a host counts what its switch sent down it)."""
    sent = egress_bytes(
        samples, [ifname for link in fabric.links for ifname in (link.a.ifname, link.b.ifname)]
    )
    return {
        link.name: sent.get(link.a.ifname, 0) + sent.get(link.b.ifname, 0)
        for link in fabric.links
        if link.a.ifname in sent or link.b.ifname in sent
    }


def dci_bytes(fabric: Fabric, samples: list, start: float | None = None, end: float | None = None) -> int:
    """Bytes that crossed the DC interconnect, measured on the egress
    counters of every DCI link end (both directions), over the whole run or
    between the samples that bracket [start, end]."""
    ends = [e.ifname for l in fabric.links if l.kind == "dci" for e in (l.a, l.b)]
    return sum(egress_bytes(samples, ends, start, end).values())


def max_mean(loads: dict) -> float | None:
    """max/mean of a {link: bytes} map: 1.0 when every link carried the
    same, n when one of n links carried everything; None when nothing was
    carried."""
    if not loads or not sum(loads.values()):
        return None
    return round(max(loads.values()) / (sum(loads.values()) / len(loads)), 3)


def queue_drops(samples: list, names: dict) -> dict:
    """{link name (dev egress): packets its queue dropped} over the run, for
    every modeled egress queue that dropped any: the loss the emulated
    network itself accounts for."""
    if len(samples) < 2:
        return {}
    first, last = samples[0][1], samples[-1][1]
    out = {}
    for dev, name in names.items():
        if dev in first and dev in last and last[dev][2] > first[dev][2]:
            out[f"{name} ({dev} egress)"] = last[dev][2] - first[dev][2]
    return out


def cpu_per_packet(agent_results: dict, emulator: dict) -> dict:
    """CPU the traffic agents and Open vSwitch spent per packet (pure).

    agents_us: agents' CPU per data packet sent (each one is also received
    by an agent, and its share of ACKs is included); agents_us_per_frame:
    per frame an agent sent or received, data and control alike;
    ovs_us: Open vSwitch's CPU per packet-hop (a packet entering one switch);
    agents_instrumented: how the agents measured themselves meanwhile
    (HPNLAB_AGENT_SPLIT: "split", HPNLAB_PROFILE: "profile"), which costs
    them CPU a drill does not spend: empty for an ordinary run;
    agents_frames: where their per-frame work ran ("c": the C frame
    library, "python": without it)."""
    got = [r for r in (agent_results or {}).values() if r]
    cpu = sum(r.get("cpu_s", 0.0) for r in got)
    packets = sum(j["packets_sent"] for r in got for j in r["jobs"])
    frames = sum(sum((r.get("frames") or {}).values()) for r in got)
    hops = emulator.get("switch_packet_hops") or 0
    ovs = emulator.get("ovs_cpu_s")
    return {
        "agents_cpu_s": round(cpu, 3),
        "packets": packets,
        "frames": frames,
        "agents_us": round(cpu / packets * 1e6, 2) if packets else None,
        "agents_us_per_frame": round(cpu / frames * 1e6, 2) if frames else None,
        "ovs_cpu_s": ovs,
        "packet_hops": hops,
        "ovs_us": round(ovs / hops * 1e6, 2) if ovs is not None and hops else None,
        "agents_instrumented": sorted({r["instrumented"] for r in got if r.get("instrumented")}),
        "agents_frames": sorted({(r.get("frames_path") or "python").split(" ")[0] for r in got}),
    }
