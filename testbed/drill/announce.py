"""What the testbed tells the controller about a drill's training jobs
(pure): every connection a job opens, with the UDP source port its packets
carry, so that the controller can choose a path per connection and pin it
in the switches before the first packet, and the answer it gets back turned
into the pins each traffic agent honours.

A connection is one rank sending to one peer: the agents give each the
source port `traffic.transfers.flow_sport` derives, and every transfer of
that pair rides it, so a path chosen for the connection holds for all of
its bytes.
"""

from testbed.fabric.paths import compute_routes, enumerate_paths
from testbed.results.analytical import schedule_of
from traffic.transfers import flow_sport


def connections(job, job_id, fabric):
    """[flow dict] of one scenario job: src/dst host and address, source
    port and bytes per iteration, one per (rank, peer) that sends."""
    hosts = job.hosts
    schedule = schedule_of(job)  # the one the analysis judges and the agents run
    flows = []
    for rank in range(len(hosts)):
        sent = {}
        for step in schedule.send_steps(rank):
            sent[step.peer] = sent.get(step.peer, 0) + step.nbytes
        for peer, nbytes in sorted(sent.items()):
            src, dst = hosts[rank], hosts[peer]
            flows.append(
                {
                    "name": f"{src}>{dst}",
                    "rank": rank,
                    "peer": peer,
                    "src": fabric.nics_of(src)[0].ip,
                    "dst": fabric.nics_of(dst)[0].ip,
                    "src_host": src,
                    "dst_host": dst,
                    "sport": flow_sport(job_id, peer, rank),
                    "bytes": nbytes,
                }
            )
    return flows


def announcement(fabric, jobs, crux=None):
    """The message the controller gets: every job (ids follow scenario
    order, as the agents number them) with its path and priority policies,
    compute, overlap, DSCP and connections, and the DSCP that selects each
    queue class (highest priority first; none without queues), and with
    `crux` (records.CruxRunning) how Crux is to run: measured, not declared."""
    classes = fabric.queues.class_dscps() if fabric.queues is not None else []
    running = {"crux_running": crux.announced()} if crux is not None else {}
    return {
        **running,
        "classes": classes,
        "jobs": [
            {
                "name": job.name,
                "id": job_id,
                "paths": job.paths,
                "priority": job.priority,
                "compute_s": job.compute_s,
                "overlap": job.overlap,
                "dscp": job.dscp,
                "pinned_port": job.port,
                "flows": connections(job, job_id, fabric),
                **({"via": {key: list(switches) for key, switches in job.via}} if job.paths == "via" else {}),
            }
            for job_id, job in enumerate(jobs)
        ],
    }


def agent_pins(fabric, answer):
    """{job name: {host: {peer rank: NIC port index}}} from the controller's
    answer: the NIC port each pinned connection leaves by."""
    out = {}
    for job in answer.get("jobs", []):
        for flow in job.get("flows", []):
            port = flow.get("port")
            if port is None:
                continue
            nic = fabric.nics_of(flow["src_host"])[0]
            out.setdefault(job["name"], {}).setdefault(flow["src_host"], {})[flow["peer"]] = nic.ports.index(
                port
            )
    return out


def fabric_links(fabric, jobs_announced):
    """{job name: sorted switch egress ifnames} that the job's connections
    could take from switch to switch (every equal-cost path of every plane
    of a healthy fabric): the links whose loads show how evenly a policy
    spread the job (the last hop, a ToR to the destination NIC, is the
    same whatever the policy and is left out)."""
    routes = compute_routes(fabric)
    name = {(e.node, e.port): e.ifname for link in fabric.links for e in (link.a, link.b)}
    far = {(link.a.node, link.a.port): link.b.node for link in fabric.links}
    far.update({(link.b.node, link.b.port): link.a.node for link in fabric.links})
    out = {}
    for job in jobs_announced["jobs"]:
        links = set()
        pinned = job.get("pinned_port")
        for flow in job["flows"]:
            ports = fabric.nic_by_ip(flow["src"]).ports
            for port in ports if pinned is None else ports[pinned : pinned + 1]:
                for hops in enumerate_paths(fabric, routes, port, flow["dst"]):
                    links.update(name[h] for h in hops if fabric.nodes[far[h]].is_switch)
        out[job["name"]] = sorted(links)
    return out
