"""What the sampled queue counters say (pure): per-egress fidelity over the
intervals a port was saturated, packets the modeled queues dropped, bytes
over the DC interconnect, and host CPU.

Samples are (t, {dev: (bytes sent, backlog bytes, drops)}) as the drill's
sampler takes them, 10 per second. A sample interval that starts and ends
with packets waiting (or that dropped) is *saturated*: the port had more to
send than its rate allowed throughout, so it should have sent at the full
rate, and achieved/configured over those intervals is the emulation's
fidelity on that link direction (1.0 = the emulator delivered what the link
promised). A direction counts as loaded when at least half of its active
intervals, and at least 1 s of them, were saturated.
"""

SATURATED_MIN_SAMPLES = 10   # a direction must be saturated for >= 1 s to count
SATURATED_MIN_SHARE = 0.5


def fidelity(samples, configured_mbit, names):
    """Per egress device that was saturated long enough: configured and
    achieved Mbit/s over its saturated samples. `configured_mbit` and
    `names` map device -> rate and device -> link name."""
    out = {}
    for dev, rate in configured_mbit.items():
        busy_bits, busy_time, busy_n, active_n = 0.0, 0.0, 0, 0
        for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
            if dev not in ca or dev not in cb:
                continue
            (bytes_a, backlog_a, drops_a), (bytes_b, backlog_b, drops_b) = ca[dev], cb[dev]
            if bytes_b > bytes_a:
                active_n += 1
            if (backlog_a > 0 and backlog_b > 0) or drops_b > drops_a:
                busy_bits += (bytes_b - bytes_a) * 8
                busy_time += tb - ta
                busy_n += 1
        if (busy_n >= SATURATED_MIN_SAMPLES and busy_n >= SATURATED_MIN_SHARE * active_n
                and busy_time > 0):
            out[f"{names[dev]} ({dev} egress)"] = {"configured_mbit": rate,
                                                  "achieved_mbit": busy_bits / busy_time / 1e6}
    return out


def egress_rates(fabric):
    """({egress dev: configured Mbit/s}, {egress dev: link name})."""
    rates, names = {}, {}
    for link in fabric.links:
        for end in (link.a, link.b):
            rates[end.ifname] = fabric.scaled_mbit(link)
            names[end.ifname] = link.name
    return rates, names


def cpu_summary(cpu, saturated=0.95):
    """Host CPU over the run: mean busy fraction and the share of 0.1 s
    samples in which every core was (nearly) busy: an emulator at 100% CPU
    delays packets and its numbers stop meaning what they say."""
    if not cpu:
        return {"mean_busy": None, "saturated_share": None}
    busy = [b for _, b in cpu]
    return {"mean_busy": round(sum(busy) / len(busy), 3),
            "saturated_share": round(sum(1 for b in busy if b >= saturated) / len(busy), 3)}


def dci_bytes(fabric, samples, start=None, end=None):
    """Bytes that crossed the DC interconnect, measured on the egress
    counters of every DCI link end (both directions), over the whole run or
    between the samples that bracket [start, end]."""
    if start is not None:
        before = [s for s in samples if s[0] <= start] or samples[:1]
        after = [s for s in samples if s[0] >= end] or samples[-1:]
        samples = [before[-1], after[0]]
    if len(samples) < 2:
        return 0
    ends = [e.ifname for l in fabric.links if l.kind == "dci" for e in (l.a, l.b)]
    first, last = samples[0][1], samples[-1][1]
    return sum(last[d][0] - first[d][0] for d in ends if d in first and d in last)


def queue_drops(samples, names):
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


def cpu_per_packet(agent_results, emulator):
    """CPU the traffic agents and Open vSwitch spent per packet (pure).

    agents_us: agents' CPU per data packet sent (each one is also received
    by an agent, and its share of ACKs is included); agents_us_per_frame:
    per frame an agent sent or received, data and control alike;
    ovs_us: Open vSwitch's CPU per packet-hop (a packet entering one switch)."""
    got = [r for r in (agent_results or {}).values() if r]
    cpu = sum(r.get("cpu_s", 0.0) for r in got)
    packets = sum(j["packets_sent"] for r in got for j in r["jobs"])
    frames = sum(sum((r.get("frames") or {}).values()) for r in got)
    hops = emulator.get("switch_packet_hops") or 0
    ovs = emulator.get("ovs_cpu_s")
    return {"agents_cpu_s": round(cpu, 3), "packets": packets, "frames": frames,
            "agents_us": round(cpu / packets * 1e6, 2) if packets else None,
            "agents_us_per_frame": round(cpu / frames * 1e6, 2) if frames else None,
            "ovs_cpu_s": ovs, "packet_hops": hops,
            "ovs_us": round(ovs / hops * 1e6, 2) if ovs is not None and hops else None}
