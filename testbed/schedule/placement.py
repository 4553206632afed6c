"""Where the controller puts the connections a job announces (pure).

Two policies, chosen per job:
- `ecmp`: nothing is pinned. The host's kernel picks the NIC port by a
  hash of the 5-tuple and every switch spreads by its select group's hash:
  the baseline, which can stack several connections on one link while
  another stays idle (hash polarization).
- `precise` (HPN): every connection gets its own path, NIC port included,
  chosen among all the paths of every plane so that concurrent connections
  use disjoint links where they can, the least loaded first. Jobs choose in
  decreasing GPU intensity and each flow the least congested path left
  (Crux's path selection, `crux.paths.select_paths`, is exactly that rule).

- `via`: the path policy written by hand: each connection a rule names
  is pinned to the first of its paths through every switch the rule lists
  (a rule for 'SRC>DST' wins over one for 'SRC'); a connection no rule
  names, or whose rule no live path meets, is hashed as with `ecmp`.
  Precise jobs choose around the via jobs' connections.

Priorities, chosen per job: `fixed` keeps the DSCP the job sends; `crux`
ranks the crux jobs by Crux priority (intensity corrected for how much a
job suffers from waiting) and compresses them into the fabric's queue
classes; each such connection's DSCP is rewritten to its class's at the
first switch, before routing.

A path is named by the egress interfaces it leaves by: the source NIC port,
then each switch port. The switches get a 5-tuple rule only where the
route has a choice (an ECMP next hop); elsewhere the route already goes
where the path does.
"""

import dataclasses

from testbed.fabric.model import Fabric
from testbed.fabric.paths import Routes, enumerate_paths

from . import crux
from .crux.model import Flow, Job
from .crux.paths import select_paths

# Crux needs positive compute to rank jobs; a job that does not compute
# between collectives ranks as nearly pure communication.
MIN_COMPUTE_S = 1e-6


def egress_names(fabric: Fabric) -> dict[tuple[str, int], str]:
    """{(node, port): ifname} of every link end: a link direction's name."""
    return {(e.node, e.port): e.ifname for link in fabric.links for e in (link.a, link.b)}


def egress_bandwidth(fabric: Fabric) -> dict[str, float]:
    """{egress ifname: bytes per second} in emulated (scaled) units, the
    units of the announced bytes."""
    return {e.ifname: fabric.scaled_bps(link) / 8 for link in fabric.links for e in (link.a, link.b)}


def candidates(fabric: Fabric, routes: Routes, flow: dict, down, port: int | None = None) -> list[tuple]:
    """[(NIC port ifname, hops)] every live path of `flow` over every plane
    (only NIC port number `port` when the job pins one)."""
    nic = fabric.nic_by_ip(flow["src"])
    ports = nic.ports if port is None else nic.ports[port : port + 1]
    return [
        (ifname, hops)
        for ifname in ports
        for hops in enumerate_paths(fabric, routes, ifname, flow["dst"], down)
    ]


def path_links(names: dict, ifname: str, hops) -> tuple:
    return (ifname,) + tuple(names[hop] for hop in hops)


def crux_jobs(fabric: Fabric, routes: Routes, announced: dict, down=frozenset()) -> tuple[list, dict, dict]:
    """Crux's view of the announced jobs: ([Job], bandwidth, {(job,
    flow name): {link tuple: (NIC port, hops)}}) for the flows that have at
    least one path; the rest are left out (and reported unreachable)."""
    names = egress_names(fabric)
    jobs, by_links = [], {}
    for job in announced["jobs"]:
        flows = []
        for flow in job["flows"]:
            options: dict = {}
            for ifname, hops in candidates(fabric, routes, flow, down, job.get("pinned_port")):
                options.setdefault(path_links(names, ifname, hops), (ifname, hops))
            if options:
                by_links[(job["name"], flow["name"])] = options
                flows.append(Flow(flow["name"], flow["bytes"], tuple(options)))
        if flows:
            jobs.append(Job(job["name"], max(job["compute_s"], MIN_COMPUTE_S), tuple(flows), job["overlap"]))
    return jobs, egress_bandwidth(fabric), by_links


def chosen_paths(answer: dict) -> dict:
    """{job name: {flow name: path}} of an answer of `place`: the pinned
    flows' paths, which a later `place` may keep."""
    return {
        job["name"]: {f["name"]: tuple(f["path"]) for f in job["flows"] if "path" in f}
        for job in (answer or {}).get("jobs", ())
    }


def place(
    fabric: Fabric,
    routes: Routes,
    announced: dict,
    down=frozenset(),
    keep: dict | None = None,
    levels: dict | None = None,
) -> tuple[dict, dict, dict]:
    """(answer, switch pins, switch marks) for the announced jobs on the
    fabric as `routes` stand. The answer lists, per job, its class where
    Crux chose one and, per flow, the policy and for pinned flows the NIC
    port and the path. Pins map switch -> {(dst ip, src ip, sport): (chosen
    port, other equal-cost ports)}; marks switch -> {(dst ip, src ip,
    sport): DSCP}. With `keep` (chosen_paths of an earlier answer), a flow
    whose path is still whole stays on it; only the others are placed
    again (around them). With `levels` ({job: level}, Crux as it runs:
    running.py), those levels stand for the crux jobs instead of the plan's,
    and every crux connection gets a mark at its first switches, whatever
    its DSCP: the mark's counter is what the running schedule reads."""
    precise = {j["name"] for j in announced["jobs"] if j.get("paths") == "precise"}
    jobs, bandwidth, by_links = crux_jobs(fabric, routes, announced, down)
    ruled = via_choices(announced, by_links)
    chosen = select_paths(
        [j for j in jobs if j.name in precise], bandwidth, keep, first=_by_hand(jobs, ruled)
    )
    classes = crux_classes(announced, jobs, bandwidth, levels)
    counted = set(classes) if levels is not None else set()
    pins: dict = {}
    marks: dict = {}
    answer: dict = {"jobs": []}
    for job in announced["jobs"]:
        out = {
            "name": job["name"],
            "paths": job.get("paths", "ecmp"),
            "priority": job.get("priority", "fixed"),
            "flows": [],
        }
        dscp = job["dscp"]
        if job["name"] in classes:
            out.update(classes[job["name"]])
            dscp = out["dscp"]
        for flow in job["flows"]:
            entry = {k: flow[k] for k in ("name", "src_host", "dst_host", "peer", "sport")}
            options = by_links.get((job["name"], flow["name"]))
            entry["candidates"] = len(options or ())
            links = chosen.get(job["name"], {}).get(flow["name"])
            if options is None:
                entry["unreachable"] = True
            elif via_rule(job, flow) and flow["name"] not in ruled.get(job["name"], {}):
                entry["via_unmet"] = True  # no live path passes the rule's switches: hashed
            elif links is not None:
                ifname, hops = options[tuple(links)]
                entry.update(port=ifname, path=list(links))
                _pin(pins, routes, flow, hops)
            if options is not None and (dscp != job["dscp"] or job["name"] in counted):
                # at the first switch of every path it may take
                for switch in {hops[0][0] for _, hops in options.values()}:
                    marks.setdefault(switch, {})[(flow["dst"], flow["src"], flow["sport"])] = dscp
            out["flows"].append(entry)
        answer["jobs"].append(out)
    return answer, pins, marks


def _by_hand(jobs: list, ruled: dict) -> list:
    """The jobs' flows that a `via` rule placed, each with that one path."""
    return [
        dataclasses.replace(
            j,
            flows=tuple(
                dataclasses.replace(f, paths=(ruled[j.name][f.name],))
                for f in j.flows
                if f.name in ruled[j.name]
            ),
        )
        for j in jobs
        if ruled.get(j.name)
    ]


def _pin(pins: dict, routes: Routes, flow: dict, hops) -> None:
    """Pin `flow` to its chosen port at each switch of `hops` where its
    route has several (the others kept behind it, for failover)."""
    for switch, port in hops:
        ecmp = routes.tables[switch][flow["dst"]]
        if len(ecmp) > 1:
            rest = tuple(p for p in ecmp if p != port)
            pins.setdefault(switch, {})[(flow["dst"], flow["src"], flow["sport"])] = (port,) + rest


def via_rule(job: dict, flow: dict) -> list | None:
    """The switches a `via` job's rules say `flow` must pass, or None."""
    if job.get("paths") != "via":
        return None
    rules = job.get("via") or {}
    return rules.get(flow["name"]) or rules.get(flow["src_host"])


def via_choices(announced: dict, by_links: dict) -> dict:
    """{job name: {flow name: link tuple}} for the `via` jobs' connections:
    of each ruled connection's live paths (in the order they are listed),
    the first that passes every switch of its rule."""
    out: dict = {}
    for job in announced["jobs"]:
        for flow in job["flows"]:
            rule = via_rule(job, flow)
            options = by_links.get((job["name"], flow["name"]))
            if not rule or not options:
                continue
            for links, (_ifname, hops) in options.items():
                if set(rule) <= {switch for switch, _port in hops}:
                    out.setdefault(job["name"], {})[flow["name"]] = links
                    break
    return out


def crux_classes(announced: dict, jobs: list, bandwidth: dict, levels: dict | None = None) -> dict:
    """{job name: {"class", "dscp", "intensity", "crux_priority"}} for the
    jobs whose priority is crux, compressed into the announced classes
    (or at `levels` where given: a job not in it is not running and keeps
    the plan's class)."""
    wanted = {j["name"] for j in announced["jobs"] if j.get("priority") == "crux"}
    # a class no DSCP selects cannot be written into a packet: skip it
    dscps = [d for d in announced.get("classes") or [] if d is not None]
    mine = [j for j in jobs if j.name in wanted]
    if not mine or not dscps:
        return {}
    plan = crux.plan(mine, bandwidth, len(dscps))
    return {
        name: {
            "class": level,
            "dscp": dscps[level],
            "intensity": round(plan.intensities[name], 4),
            "crux_priority": round(plan.priorities[name], 4),
        }
        for name, level in {**plan.levels, **(levels or {})}.items()
        if name in plan.levels
    }


def crux_declared(
    fabric: Fabric, routes: Routes, announced: dict, down=frozenset()
) -> tuple[list, dict, int]:
    """(the crux jobs as declared, bandwidth, levels available): what Crux
    as it runs starts from."""
    jobs, bandwidth, _ = crux_jobs(fabric, routes, announced, down)
    wanted = {j["name"] for j in announced["jobs"] if j.get("priority") == "crux"}
    dscps = [d for d in announced.get("classes") or [] if d is not None]
    return [j for j in jobs if j.name in wanted], bandwidth, len(dscps)


def crux_plan(fabric: Fabric, routes: Routes, announced: dict, levels: int, down=frozenset()) -> dict:
    """Crux's whole plan (paths, intensities, priorities, compressed
    levels) for every announced job, whatever its path policy: what the
    controller would schedule, as a JSON-ready dict."""
    jobs, bandwidth, _ = crux_jobs(fabric, routes, announced, down)
    return crux.plan(jobs, bandwidth, levels).as_dict()
