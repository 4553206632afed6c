#!/usr/bin/env python3
"""Capacity: how large an HPN fabric this machine emulates faithfully, and
at what time dilation.

For HPN fabrics of 8, 16, 32 and 64 hosts (dual-plane, dual-ToR, segments
of 8 hosts) it runs one ring AllReduce over every host, shaped like
scenarios/allreduce-ring.yaml (5 GB per rank and iteration scaled by 5000,
200 ms of compute, 8 iterations): first at time dilation 1, then at the
next steps of the capacity plan's ladder until a run is trustworthy (every
check of the trust gate held, the agents' reading among them) with
fidelity >= 0.95. It prints, per fabric, what `hpnlab plan` recommends,
the fidelity and measured/analytical iteration time at dilation 1, the
smallest dilation that was trustworthy with fidelity >= 0.95 with the
same numbers, the median agent's reading and the CPU a packet cost the
agents and Open vSwitch there (which the plan prices at the calibration's,
measured on 8 hosts), and the wall time all the runs took. The agents
run in as many processes as a drill starts (HPNLAB_AGENT_PROCESSES is
passed on), and the plan is priced so.

Every point is one `hpnlab run --dilation N`; the scenarios and their
reports stay in --out. Needs root and Open vSwitch; run nothing else that
builds a fabric meanwhile.

    sudo .venv/bin/python bench/capacity.py [--hosts 8 16 32 64] [--out DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import yaml  # noqa: E402

from testbed.fabric.scenario import load_scenario  # noqa: E402
from testbed.plan import budget, calibration  # noqa: E402
from testbed.plan.processes import PROCESSES_ENV  # noqa: E402
from testbed.results.text import fmt, text_table  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HPNLAB = [sys.executable, "-m", "testbed.cli"]
HOSTS_PER_SEGMENT = 8
TARGET_FIDELITY = 0.95
CANNOT_RUN_HERE = 3


def scenario_doc(hosts):
    """A ring AllReduce over every host of an HPN fabric of `hosts` hosts."""
    if hosts % HOSTS_PER_SEGMENT:
        raise ValueError(f"{hosts} hosts do not make segments of {HOSTS_PER_SEGMENT}")
    segments = hosts // HOSTS_PER_SEGMENT
    names = [f"s{s}h{h}" for s in range(segments) for h in range(HOSTS_PER_SEGMENT)]
    return {
        "name": f"capacity-{hosts}",
        "description": f"bench/capacity.py: a {hosts}-rank ring AllReduce on a dual-plane HPN "
        f"fabric of {segments} segment(s) of {HOSTS_PER_SEGMENT} hosts.",
        "topology": {"kind": "hpn", "segments": segments, "hosts_per_segment": HOSTS_PER_SEGMENT},
        "duration": 120,  # a limit: a drill of jobs only ends with its last job
        "jobs": [
            {
                "name": f"ring{hosts}",
                "hosts": names,
                "collective": "ring",
                "bytes": "5GB",
                "compute": "200ms",
                "iterations": 8,
            }
        ],
    }


def write_scenario(directory, hosts):
    path = os.path.join(directory, f"capacity-{hosts}.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(scenario_doc(hosts), fh, sort_keys=False)
    return path


class Point(NamedTuple):
    """What one run at one dilation measured."""

    fidelity: float
    ratio: float | None  # iteration time / analytical
    wall: float  # seconds all of it took here
    trusted: bool
    reading: float | None  # the median agent's reading on time
    agents_us: float | None  # agents' CPU per data packet
    ovs_us: float | None  # Open vSwitch's CPU per packet-hop


def run_point(path, dilation, out):
    """One `hpnlab run` at `dilation`: its Point, or None when this machine
    cannot run it at all."""
    t0 = time.monotonic()
    proc = subprocess.run(
        HPNLAB + ["run", path, "--dilation", f"{dilation:g}", "--out", out],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    if proc.returncode == CANNOT_RUN_HERE:
        return None
    try:
        with open(os.path.join(out, "results.json")) as fh:
            results = json.load(fh)
    except (OSError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"  dilation {dilation:g}: no results ({tail[0]})", flush=True)
        return Point(0.0, None, wall, False, None, None, None)
    metrics = results["metrics"]
    fidelity = metrics["fidelity"]["min"]
    jobs = metrics.get("jobs") or {}
    cpp = metrics.get("cpu_per_packet") or {}
    return Point(
        fidelity if fidelity is not None else 0.0,
        next(iter(jobs.values()), {}).get("iteration_time_vs_analytical"),
        wall,
        bool(results.get("trustworthy")),
        (metrics.get("generators") or {}).get("reading_median"),
        cpp.get("agents_us"),
        cpp.get("ovs_us"),
    )


def measure(hosts, directory):
    """The row of one fabric size."""
    path = write_scenario(directory, hosts)
    sc = load_scenario(path)
    planned = budget.plan(sc, calibration.load_or_defaults(), os.environ.get(PROCESSES_ENV))
    first = found = None
    wall, runs = 0.0, 0
    for n in budget.LADDER:
        point = run_point(path, n, os.path.join(directory, f"capacity-{hosts}-x{n:g}"))
        if point is None:
            head = [hosts, len(sc.fabric.switches()), f"{planned.dilation:g}", "cannot run here"]
            return head + [""] * 7 + [runs, fmt(wall)]
        runs += 1
        wall += point.wall
        print(
            f"  {hosts} hosts, dilation {n:g}: fidelity {fmt(point.fidelity)}, "
            f"iteration/analytical {fmt(point.ratio)}, median agent's reading {fmt(point.reading)}, "
            f"{'trustworthy' if point.trusted else 'UNTRUSTWORTHY'}, agents {fmt(point.agents_us)} us "
            f"per packet, Open vSwitch {fmt(point.ovs_us)} us per packet-hop, {point.wall:.0f} s",
            flush=True,
        )
        first = first or point
        if point.trusted and point.fidelity >= TARGET_FIDELITY:
            found = (n, point)
            break
    if found:
        n, p = found
        at = [f"{n:g}", fmt(p.fidelity), fmt(p.ratio), fmt(p.reading), fmt(p.agents_us), fmt(p.ovs_us)]
    else:
        at = [f"> {budget.LADDER[-1]:g}"] + ["-"] * 5
    return (
        [hosts, len(sc.fabric.switches()), f"{planned.dilation:g}", fmt(first.fidelity), fmt(first.ratio)]
        + at
        + [runs, fmt(wall)]
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument(
        "--out", default=None, help="where scenarios and reports go (default: a new folder under /tmp)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("capacity: needs root (every point is an 'hpnlab run')")
    directory = args.out or tempfile.mkdtemp(prefix="hpnlab-capacity-")
    os.makedirs(directory, exist_ok=True)
    print(
        f"capacity: reports in {directory}; capacity for the plan: "
        f"{calibration.load_or_defaults().describe()}",
        flush=True,
    )
    rows = [measure(hosts, directory) for hosts in args.hosts]
    print()
    print(
        text_table(
            [
                "hosts",
                "switches",
                "plan N",
                "fidelity@1",
                "iter/analytical@1",
                f"N (trusted, fidelity>={TARGET_FIDELITY:g})",
                "fidelity@N",
                "iter/analytical@N",
                "reading@N",
                "agents us/pkt@N",
                "OVS us/hop@N",
                "runs",
                "wall s",
            ],
            rows,
        )
    )
    print(
        f"(ring AllReduce over every host, 5 GB / 5000 per rank, 200 ms compute, 8 iterations; "
        f"plan N: what 'hpnlab plan' recommends; N: the smallest step of "
        f"{', '.join(f'{n:g}' for n in budget.LADDER)} whose run was trustworthy with fidelity >= "
        f"{TARGET_FIDELITY:g}; reading: the median agent's reading on time; agents us/pkt and OVS "
        f"us/hop: the CPU per data packet and per packet-hop that run cost, which the plan prices "
        f"at the calibration's)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
