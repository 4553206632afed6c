#!/usr/bin/env python3
"""Agent benchmark: what the traffic agents and Open vSwitch spend per packet.

Runs a training drill (default scenarios/allreduce-ring.yaml: 8 ranks, ring
AllReduce, 8 iterations) --runs times with `hpnlab run` and prints, per run
and as a range, from each run's results.json:

  agents us/packet   the agents' CPU (user + system, all processes together) per
                     data packet sent; every data packet is also received
                     by an agent, and its share of ACKs is included
  agents us/frame    the same CPU per frame an agent sent or received
                     (data, ACK, NAK, CNP)
  OVS us/packet-hop  ovs-vswitchd's CPU per packet entering one switch
  fidelity           the run's fidelity (1.0: the emulator kept up)

A CPU figure moves threefold between machines of one kind, so each is
also given as a ratio to a reference measured in the same run on the same
machine: the CPU time hpnlab's raw sender spends per frame it puts on a
veth pair (bench/generator.py, one core), measured before the runs and
again after them. Targets, as ratios: agents at most 2x the reference per
frame, Open vSwitch at most 2.5x per packet-hop. Needs root and Open
vSwitch; run it on an otherwise quiet machine. The agents run as a
drill runs them, one process per core, unless --processes says how many,
with their per-frame work in C (traffic/cframes.py) unless --frames python.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET_AGENTS_RATIO = 2.0  # agents' CPU per frame / the raw sender's
TARGET_OVS_RATIO = 2.5  # Open vSwitch's CPU per packet-hop / the raw sender's per frame


def run_once(scenario, out, extra, split=False, processes=None, frames=None):
    hpnlab = os.path.join(os.path.dirname(sys.executable), "hpnlab")
    argv = [hpnlab] if os.path.exists(hpnlab) else [sys.executable, "-m", "testbed.cli"]
    env = dict(os.environ)
    if split:
        env["HPNLAB_AGENT_SPLIT"] = "1"
    if processes:
        env["HPNLAB_AGENT_PROCESSES"] = str(processes)
    if frames == "python":
        env["HPNLAB_AGENT_FRAMES"] = "python"
    proc = subprocess.run(
        argv + ["run", scenario, "--out", out] + extra, cwd=ROOT, capture_output=True, text=True, env=env
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
        "split": cpu_split(os.path.join(out, "run")) if split else None,
        **agent_processes(os.path.join(out, "run")),
    }


def agent_processes(run_dir):
    """How many processes played the drill's hosts, and which way their
    frames took (C library or Python; from the agents' results)."""
    groups, paths = set(), set()
    for name in os.listdir(run_dir):
        if name.startswith("agent-") and name.endswith(".json") and not name.endswith(".cfg.json"):
            with open(os.path.join(run_dir, name)) as fh:
                res = json.load(fh)
            groups.add(tuple(res.get("process", {}).get("hosts", [name])))
            paths.add(res.get("frames_path", "python").split(" ")[0])
    return {"processes": len(groups), "frames": "/".join(sorted(paths))}


def cpu_split(run_dir):
    """The agents' CPU by part of their loop's pass (agent.CpuSplit), summed
    over the agents, in us per frame they sent or received; None if the
    agents did not measure it."""
    seconds, frames = {}, 0
    for name in sorted(os.listdir(run_dir)):
        if not (name.startswith("agent-") and name.endswith(".json")) or name.endswith(".cfg.json"):
            continue
        with open(os.path.join(run_dir, name)) as fh:
            res = json.load(fh)
        if "cpu_split_s" not in res:
            return None
        for part, v in res["cpu_split_s"].items():
            seconds[part] = seconds.get(part, 0.0) + v
        frames += sum(res["frames"].values())
    return {part: v / frames * 1e6 for part, v in seconds.items()} if frames else None


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
    ap.add_argument(
        "--processes",
        type=int,
        help="agent processes to play the hosts (HPNLAB_AGENT_PROCESSES; default one per core)",
    )
    ap.add_argument(
        "--frames",
        choices=("c", "python"),
        default="c",
        help="the agents' per-frame work in C where the drill built it (c, the default) "
        "or all in Python (HPNLAB_AGENT_FRAMES=python), for comparison",
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="also print where the agents' CPU goes by part of their loop (costs them a few "
        "system calls per pass, so the totals of such runs are not comparable with others)",
    )
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from generator import reference_us_per_frame

    extra = ["--dilation", args.dilation] if args.dilation else []
    before = reference_us_per_frame()
    print(f"reference: the raw sender spends {before:.2f} us of one core per frame (bench/generator.py)")
    rows = []
    print(
        f"{'run':>3}  {'agents us/packet':>16}  {'agents us/frame':>15}  "
        f"{'OVS us/packet-hop':>17}  {'fidelity':>8}  verdict"
    )
    with tempfile.TemporaryDirectory(prefix="hpnlab-bench-") as tmp:
        for i in range(args.runs):
            r = run_once(
                args.scenario, os.path.join(tmp, f"run{i}"), extra, args.split, args.processes, args.frames
            )
            c = r["cost"]
            rows.append(r)
            fid = r["fidelity"]
            print(
                f"{i + 1:>3}  {c.get('agents_us') or 0:>16.1f}  "
                f"{c.get('agents_us_per_frame') or 0:>15.1f}  {c.get('ovs_us') or 0:>17.1f}  "
                f"{fid if fid is not None else 0:>8.3f}  {r['verdict']} "
                f"({r['processes']} agent processes, frames in {r['frames']})",
                flush=True,
            )
            if r["split"]:
                parts = ", ".join(f"{part} {us:.1f}" for part, us in r["split"].items())
                print(f"     agents us/frame by part of the loop: {parts}", flush=True)
    after = reference_us_per_frame()
    ref = (before + after) / 2
    print(f"reference again after the runs: {after:.2f} us per frame (mean {ref:.2f})")
    per_frame = [r["cost"].get("agents_us_per_frame") for r in rows]
    per_hop = [r["cost"].get("ovs_us") for r in rows]
    print(
        f"\nagents: {span([r['cost'].get('agents_us') for r in rows])} us per data packet, "
        f"{span(per_frame)} us per frame sent or received; Open vSwitch: "
        f"{span(per_hop)} us per packet-hop ({args.runs} runs of {args.scenario})"
    )
    ratio_frame = [v / ref for v in per_frame if v is not None]
    ratio_hop = [v / ref for v in per_hop if v is not None]
    print(
        f"as ratios to the reference: agents {span(ratio_frame)}x per frame (target <= "
        f"{TARGET_AGENTS_RATIO:g}x), Open vSwitch {span(ratio_hop)}x per packet-hop (target <= "
        f"{TARGET_OVS_RATIO:g}x)"
    )
    met = ratio_frame and max(ratio_frame) <= TARGET_AGENTS_RATIO
    met_ovs = ratio_hop and max(ratio_hop) <= TARGET_OVS_RATIO
    print(f"agents: {'met' if met else 'NOT met'}; Open vSwitch: {'met' if met_ovs else 'NOT met'}")
    return 0 if met and met_ovs else 1


if __name__ == "__main__":
    sys.exit(main())
