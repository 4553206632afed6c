"""Training jobs in a drill, as plans (pure): which ranks each host's traffic
agent plays, and the configuration file each agent reads."""

import os

from traffic import roce


def rank_specs(fabric, jobs, pins=None):
    """{host: [job spec for the rank on that host]}; job ids follow scenario
    order. `pins` {job: {host: {peer rank: NIC port}}}: the connections the
    controller pinned (testbed/drill/announce.py)."""
    pins = pins or {}
    per_host = {}
    for job_id, job in enumerate(jobs):
        peers = []
        for h in job.hosts:
            nic = fabric.nics_of(h)[0]
            peers.append({"host": h, "ip": nic.ip, "mac": nic.mac})
        groups = job.rank_groups
        for rank, h in enumerate(job.hosts):
            per_host.setdefault(h, []).append(
                {
                    "id": job_id,
                    "name": job.name,
                    "rank": rank,
                    "peers": peers,
                    "collective": job.collective,
                    "bytes": job.bytes,
                    "groups": groups,
                    "compute_s": job.compute_s,
                    "overlap": job.overlap,
                    "iterations": job.iterations,
                    "dscp": job.dscp,
                    "port": job.port,
                    "microbatches": job.microbatches,
                    "start": job.start,
                    "pins": pins.get(job.name, {}).get(h, {}),
                }
            )
    return per_host


def agent_configs(fabric, jobs, run_dir, deadline_s, transport=None, pins=None):
    """{host: config dict} for every host that runs at least one rank;
    `pins` as for rank_specs; `transport` holds the scenario's knobs (DCQCN rates as shares of the
    port's line rate, turned into bit/s here).

    Under time dilation (testbed/fabric/dilation.py) the fabric, the jobs
    and the deadline arrive already dilated: rates, compute phases, starts
    and the deadline are this machine's. The transport's timers are not:
    `time_dilation` tells the agent to stretch every one of them, its
    defaults and the scenario's knobs alike, which stay in emulated time
    here so that nothing is stretched twice."""
    rates = {}
    for link in fabric.links:
        if link.kind == "access":
            rates[link.a.ifname] = fabric.scaled_bps(link)
    out = {}
    for host, specs in rank_specs(fabric, jobs, pins).items():
        nic = fabric.nics_of(host)[0]
        rate = min(rates[p] for p in nic.ports)
        knobs = dict(transport or {})
        dcqcn = dict(knobs.pop("dcqcn", {}))
        for share in [k for k in dcqcn if k.endswith("_share")]:
            dcqcn[share.replace("_share", "_bps")] = dcqcn.pop(share) * rate
        out[host] = {
            "host": host,
            "deadline_s": deadline_s,
            "payload": roce.payload_for_mtu(fabric.mtu),
            "time_dilation": fabric.time_dilation,
            **knobs,
            "dcqcn": dcqcn,
            "out": os.path.join(run_dir, f"agent-{host}.json"),
            "nic": {
                "ip": nic.ip,
                "mac": nic.mac,
                "ports": list(nic.ports),
                "rate_bps": min(rates[p] for p in nic.ports),
            },
            "jobs": specs,
        }
    return out
