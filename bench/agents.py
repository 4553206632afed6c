#!/usr/bin/env python3
"""Agent benchmark: what the traffic agents and Open vSwitch spend per packet.

Runs a training drill (default scenarios/allreduce-ring.yaml: 8 ranks, ring
AllReduce, 8 iterations) --runs times with `hpnlab run` and prints, per run
and as a range, from each run's results.json:

  agents us/packet   the agents' CPU (user + system, all 8 together) per
                     data packet sent; every data packet is also received
                     by an agent, and its share of ACKs is included
  agents us/frame    the same CPU per frame an agent sent or received
                     (data, ACK, NAK, CNP)
  OVS us/packet-hop  ovs-vswitchd's CPU per packet entering one switch
  fidelity           the run's fidelity (1.0: the emulator kept up)

Target: agents <= 15 us per frame sent or received. Needs root and Open
vSwitch; run it on an otherwise quiet machine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET_US_PER_FRAME = 15.0


def run_once(scenario, out, extra):
    hpnlab = os.path.join(os.path.dirname(sys.executable), "hpnlab")
    argv = [hpnlab] if os.path.exists(hpnlab) else [sys.executable, "-m", "testbed.cli"]
    proc = subprocess.run(
        argv + ["run", scenario, "--out", out] + extra, cwd=ROOT, capture_output=True, text=True
    )
    try:
        with open(os.path.join(out, "results.json")) as fh:
            res = json.load(fh)
    except (OSError, json.JSONDecodeError):
        sys.exit(
            f"bench/agents.py: the drill wrote no results (exit {proc.returncode}):\n" + proc.stderr[-2000:]
        )
    m = res["metrics"]
    return {
        "cost": m.get("cpu_per_packet") or {},
        "fidelity": m["fidelity"].get("min"),
        "verdict": "PASSED" if res.get("passed") else "not passed",
    }


def span(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}-{hi:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="scenarios/allreduce-ring.yaml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dilation", help="passed to hpnlab run --dilation")
    args = ap.parse_args()
    extra = ["--dilation", args.dilation] if args.dilation else []
    rows = []
    print(
        f"{'run':>3}  {'agents us/packet':>16}  {'agents us/frame':>15}  "
        f"{'OVS us/packet-hop':>17}  {'fidelity':>8}  verdict"
    )
    with tempfile.TemporaryDirectory(prefix="hpnlab-bench-") as tmp:
        for i in range(args.runs):
            r = run_once(args.scenario, os.path.join(tmp, f"run{i}"), extra)
            c = r["cost"]
            rows.append(r)
            fid = r["fidelity"]
            print(
                f"{i + 1:>3}  {c.get('agents_us') or 0:>16.1f}  "
                f"{c.get('agents_us_per_frame') or 0:>15.1f}  {c.get('ovs_us') or 0:>17.1f}  "
                f"{fid if fid is not None else 0:>8.3f}  {r['verdict']}",
                flush=True,
            )
    per_frame = [r["cost"].get("agents_us_per_frame") for r in rows]
    print(
        f"\nagents: {span([r['cost'].get('agents_us') for r in rows])} us per data packet, "
        f"{span(per_frame)} us per frame sent or received; Open vSwitch: "
        f"{span([r['cost'].get('ovs_us') for r in rows])} us per packet-hop "
        f"({args.runs} runs of {args.scenario})"
    )
    worst = max((v for v in per_frame if v is not None), default=None)
    ok = worst is not None and worst <= TARGET_US_PER_FRAME
    print(f"target <= {TARGET_US_PER_FRAME:g} us per frame: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
