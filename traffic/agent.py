"""Traffic agent: plays the ranks of training jobs that live on one host.

Started by the runner in a host's network namespace, one process per
host or, when asked, one for several hosts:

    python -m traffic.agent CONFIG.json [CONFIG.json ...]

Each configuration is one host's; the process makes that host's sockets
inside the host's network namespace (the config's `netns`) and plays all
its hosts in one loop (see play).

Each rank runs its iterations: a compute phase (the GPU busy; here just
time passing), then the steps of its collective schedule, each a transfer
to or from a peer rank. Transfers are RoCEv2-looking frames (built once
with scapy, patched per packet; see roce.py) written to a raw socket on the
NIC port the kernel's multipath route picks for the flow (so the host's
per-flow spreading, dead-port skipping and /32 overrides apply), or on a
pinned port while its link is up. Reliability is go-back-N driven by
receiver ACK/NAKs and timeouts; the rate follows DCQCN on CNPs, per queue
pair. At line rate the kernel paces each port (see nic.Port); only a flow DCQCN holds below line
rate is paced here. Frames arrive on a UDP socket bound to port 4791 that
also reports each datagram's ECN bits.

The loop is driven by events, so that its CPU goes to packets, not to
bookkeeping: it sleeps in select() until a frame arrives, a full port
queue has room, a job's next phase begins, a paced flow may send, or the
housekeeping tick (timeouts, route refresh, DCQCN timers) is due.

Every time in the agent (timers, compute phases, deadlines) is multiplied
by the config's `time_dilation` N, as the link rates are divided by it.

Results (per job: iteration records, bytes, retransmissions, CNPs; per
port: whether the line stayed busy while frames waited; CPU time and frames
handled) go to the JSON file named in the config; one JSON line per
finished iteration goes to stdout for progress.

This module holds the process: its configuration, the loop and the
results. The ranks' progress is job.py's, the sending side (ports, flows,
control frames) sender.py's, the receiving side receiver.py's.
"""

import gc
import json
import os
import resource
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence

from . import cframes, gobackn, netns, roce, transport
from .collectives import Step
from .job import Job
from .receiver import Receiver
from .sender import Sender
from .transfers import FlowSettings

ROUTE_SETTLE_S = 0.05  # after a link or route event, re-ask the kernel this long
TICK_S = 0.01  # housekeeping: go-back-N timeouts, DCQCN timers, route refresh
COALESCE_FRAMES = 6  # a wake-up comes at most every this many frame times
READ_TOLERANCE_S = 1e-3  # reads up to this much later than moderation allows are on time
WARM_LEAD_S = 0.1  # a job's paths are warmed again this long before it starts


class CpuSplit:
    """Where the loop's CPU goes, part by part of each pass: the thread's CPU
    clock read at the end of each part (five system calls a pass, so only
    on request: HPNLAB_AGENT_SPLIT=1, a developer aid like HPNLAB_PROFILE).
    `receive` includes what arriving frames set off (ACKs sent, transfers
    started), `send` the data frames queued, `wait` the moderation sleep and
    select() (the wake-up's own cost lands there), `other` the rest."""

    PARTS = ("receive", "send", "wait", "other")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PARTS, 0.0)
        self.last = time.thread_time()

    def mark(self, part: str) -> None:
        """The CPU since the last mark was spent in `part`."""
        now = time.thread_time()
        self.seconds[part] += now - self.last
        self.last = now


class Agent:
    """The ranks of one host and the loop that plays them; the driver of
    their jobs' steps (see job.StepDriver)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.nic = cfg["nic"]
        self.dilation = float(cfg.get("time_dilation", 1.0))
        d = self.dilation
        payload = cfg.get("payload", 4096)
        self.line_rate_bps = self.nic["rate_bps"]
        # Longer than the deepest queue (100 ms) twice over: a timeout must
        # mean loss, not a full queue. NAKs repair ordinary loss much sooner.
        rto_s = cfg.get("rto_s", 0.25) * d
        self.linger_s = 2 * rto_s + 0.1 * d
        self.tick_s = TICK_S * d
        self.route_settle_s = ROUTE_SETTLE_S * d
        self.reroute_until = 0.0
        dcqcn = dict(cfg.get("dcqcn", {}))
        for key in ("alpha_period_s", "increase_period_s", "cnp_interval_s"):
            dcqcn[key] = dcqcn.get(key, getattr(transport.DcqcnParams, key)) * d
        dcqcn_params = transport.DcqcnParams(line_rate_bps=self.line_rate_bps, **dcqcn)
        self.jobs = [Job(spec, 0.0, WARM_LEAD_S * d) for spec in cfg["jobs"]]
        self.coalesce_s = COALESCE_FRAMES * (payload + roce.FRAME_OVERHEAD) * 8 / self.line_rate_bps
        peer_by_ip = {p["ip"]: p for job in self.jobs for p in job.peers}
        self.frames = {"data_sent": 0, "ctrl_sent": 0, "warm_sent": 0, "received": 0}
        # The frames' per-packet work in C when the runner built it (cframes.py)
        native, self.frames_path = cframes.load(cfg.get("frames_library"))
        if native is None and cfg.get("frames_library"):
            print(f"{cfg['host']}: frames in {self.frames_path}", file=sys.stderr, flush=True)
        settings = FlowSettings(
            payload=payload,
            window=cfg.get("window", 64),
            rto_s=rto_s,
            line_rate_bps=self.line_rate_bps,
            cframes=native,
        )
        self.sender = Sender(
            self.nic, settings, dcqcn_params, cfg.get("control_dscp"), peer_by_ip, self.frames
        )
        self.receiver = Receiver(
            self.jobs,
            self.sender,
            self.transfer_ended,
            peer_by_ip,
            self.frames,
            payload=payload,
            cnp_interval_s=dcqcn_params.cnp_interval_s,
            nak_retry_s=gobackn.DEFAULT_NAK_RETRY_S * d,
            # A frame may wait one moderation interval by design, plus the
            # scheduler's usual jitter; what waits longer was read late.
            reads=transport.ReadMeter(self.line_rate_bps, self.coalesce_s + READ_TOLERANCE_S),
            cframes=native,
        )
        self.split: CpuSplit | None = None  # set by play() when asked to measure
        self.rx_overflows: int | None = None

    def set_start(self, start_at: float) -> None:
        """All agents get the same wall-clock start (CLOCK_REALTIME is shared
        by every namespace of the machine); keep time on the monotonic clock."""
        start_mono = time.monotonic() + (start_at - time.time())
        for job in self.jobs:
            job.set_clock(start_mono)
        self.deadline = start_mono + self.cfg["deadline_s"]

    # --- one pass of the loop (see play) ----------------------------------
    def begin(self) -> None:
        """Ready to play: the loop's own state."""
        self.done_at: float | None = None
        self.next_tick = 0.0
        self.passed_at = 0.0
        self.due_at = 0.0  # due() as of the end of its last full turn
        self.finished = False

    def turn(self, readable: Sequence[object], prompted: bool = True) -> bool:
        """This agent's share of a pass: timers, its jobs, the frames that
        arrived and the frames that may leave. False once it is through:
        its jobs done (and a linger after) or its deadline passed.
        `prompted`: select() found one of its sockets readable or a port of
        its writable. An agent neither prompted nor due has nothing to do:
        what its flows may send changes only with a frame that arrives, a
        port that drains, a timer or a job's phase (a pass of a process
        that plays several hosts often comes for another host's frames)."""
        sender, receiver = self.sender, self.receiver
        now = time.monotonic()
        if now >= self.deadline:
            return False
        if self.done_at is None and all(j.done for j in self.jobs):
            self.done_at = now
            # The runner ends every agent at once when all have said so
            # (testbed/drill/agents.py): no linger is needed then.
            print(json.dumps({"event": "done", "host": self.cfg["host"]}), flush=True)
        # Linger after the last job: a peer whose final ACK from us was
        # lost retransmits after its timeout and must get the ACK again.
        if self.done_at is not None and now >= self.done_at + self.linger_s:
            return False
        if not prompted and now < self.due_at:
            return True
        if sender.picker.events in readable and sender.picker.changed():
            # A link or route changed: every flow asks again now, and at
            # each tick for a little while, until the kernel has settled.
            self.reroute_until = now + self.route_settle_s
            self.next_tick = now
        if now >= self.next_tick:
            sender.tick(now, now <= self.reroute_until)
            self.next_tick = now + self.tick_s
        for job in self.jobs:
            if now >= job.wake_at:
                job.advance(now, self)
        split = self.split
        if split:
            split.mark("other")
        if receiver.receive(now):
            now = time.monotonic()
        self.passed_at = now  # the pass has taken in its frames
        if split:
            split.mark("receive")
        sender.pump(now)
        if split:
            split.mark("send")
        self.due_at = self.due()
        return True

    def due(self) -> float:
        """When this agent next needs the clock, frames aside."""
        due = min(self.next_tick, self.deadline, *(j.wake_at for j in self.jobs))
        if self.sender.any_paced:
            due = min(due, self.sender.paced_wake())
        return due

    def finish(self) -> None:
        """Through: note what the kernel dropped unread and close the
        receive socket (a late frame now meets a closed port, as when an
        agent process exits)."""
        with netns.entered(self.cfg.get("netns")):
            self.rx_overflows = self.receiver.overflows()
        self.receiver.rx.close()
        self.finished = True

    # --- the jobs' steps (job.StepDriver) ----------------------------------
    def transfer_ended(self, job: Job, step: Step, now: float) -> None:
        """The transfer of a step of the job ended: the job moves on now."""
        job.transfer_ended(step)
        job.advance(now, self)

    def warm(self, job: Job) -> None:
        self.sender.warm(job)

    def start_send(self, job: Job, step: Step, now: float) -> None:
        self.sender.start_send(job, step, now)

    def step_done(self, job: Job, step: Step) -> bool:
        if step.kind == "send":
            return self.sender.finish_send(job, step)
        return self.receiver.finish_recv(job, step)

    def progress(self, record: dict) -> None:
        print(json.dumps(record), flush=True)  # progress for the runner

    def results(self, extra: dict) -> dict:
        """The results file's content; `extra`: what run() returned."""
        ports = self.sender.ports
        meters = {p.ifname: p.meter for p in ports.values()}
        return {
            "host": self.cfg["host"],
            "jobs": [j.results() for j in self.jobs],
            # Whether each port's line stayed busy while frames waited
            # for it: the generator's fidelity (see transport.LineMeter).
            "pacing": {
                "late_packets": sum(m.late for m in meters.values()),
                "max_lag_s": max(m.max_lag_s for m in meters.values()),
                "lost_s": sum(m.lost_s for m in meters.values()),
                "tx_s": sum(m.tx_s for m in meters.values()),
                "ports": {name: m.summary() for name, m in meters.items()},
            },
            # Whether the frames that arrived were read in time: the
            # receiving side's fidelity (see transport.ReadMeter).
            "reading": self.receiver.reads.summary(),
            "port_send_errors": {p.ifname: p.errors for p in ports.values()},
            "control_frames_dropped": sum(p.ctrl_dropped for p in ports.values()),
            "frames": dict(self.frames),
            "route_lookups": self.sender.picker.lookups,
            # Frames the kernel dropped because this agent did not read
            # them in time (the host short of CPU): a loss the emulated
            # network did not cause.
            "rx_buffer_bytes": self.receiver.rx_buffer,
            "rx_overflows": self.rx_overflows,
            "time_dilation": self.dilation,
            "frames_path": self.frames_path,
            **extra,
        }


def play(agents: list[Agent], stopped: Callable[[], bool]) -> dict:
    """Play the agents' jobs in one loop, each pass giving every agent its
    turn, until all are through or `stopped()`. One process may play
    several hosts: a pass then takes in the frames of all of them with one
    sleep and one select(), and the process's caches stay warm where one
    process per host wakes up cold each time. Returns the CPU the loop
    took and its wake-ups, for the whole process."""
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    split = CpuSplit() if os.environ.get("HPNLAB_AGENT_SPLIT") else None
    for agent in agents:
        agent.begin()
        agent.split = split
    port_of_sock = {sock: port for a in agents for sock, port in a.sender.port_of_sock.items()}
    agent_of_sock = {sock: a for a in agents for sock in a.sender.port_of_sock}
    for a in agents:
        agent_of_sock[a.receiver.rx] = agent_of_sock[a.sender.picker.events] = a
    wakeup_floor = min(a.coalesce_s for a in agents)

    def readers(agents: list[Agent]) -> list[socket.socket]:  # what select() watches for input
        return [sock for a in agents for sock in (a.receiver.rx, a.sender.picker.events)]

    live = list(agents)
    rlist = readers(live)
    readable: Sequence[object] = ()
    prompted: set[Agent] = set(agents)  # the first pass: every agent
    wakeups = 0
    while live and not stopped():
        through = [a for a in live if not a.turn(readable, a in prompted)]
        if through:
            for agent in through:
                agent.finish()
            live = [a for a in live if not a.finished]
            if not live:
                break
            rlist = readers(live)
        due = min(a.due_at for a in live)
        wlist = [p.sock for a in live for p in a.sender.ports.values() if p.blocked]
        # Interrupt moderation, as NICs do it: a pass comes at most every
        # few frame times, so that each handles several frames. The
        # kernel queues hold more than that, so no port runs dry
        # meanwhile, and no timer is made later than it is due. Sleeping
        # first means that, under load, select() finds work waiting and
        # returns at once: one blocking call per pass, not two.
        rest = min(max(a.passed_at for a in live) + wakeup_floor, due) - time.monotonic()
        if split:
            split.mark("other")
        if rest > 0:
            time.sleep(rest)
        readable, writable, _ = select.select(rlist, wlist, [], max(0.0, due - time.monotonic()))
        if split:
            split.mark("wait")
        wakeups += 1
        for sock in writable:
            port_of_sock[sock].blocked = False
        prompted = {agent_of_sock[sock] for sock in readable}
        prompted.update(agent_of_sock[sock] for sock in writable)
    for agent in live:
        agent.finish()
    # getrusage, not os.times(): its total is exact (scheduler time), where
    # os.times() counts whole 10 ms ticks, a large error on 0.1 s of CPU.
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    user, system = cpu.ru_utime - cpu0.ru_utime, cpu.ru_stime - cpu0.ru_stime
    out: dict = {"cpu_s": user + system, "cpu_user_s": user, "cpu_system_s": system, "wakeups": wakeups}
    if split:
        out["cpu_split_s"] = dict(split.seconds)
        out["instrumented"] = "split"  # its clock reads cost the agents CPU of their own
    return out


def shares(agents: list[Agent], process: dict) -> list[dict]:
    """Each agent's share of what play() measured for the process, by the
    frames it handled (so the agents' sums are the process's), with the
    whole under "process"."""
    frames = [sum(a.frames.values()) for a in agents]
    total = sum(frames)
    out = []
    for n in frames:
        w = n / total if total else 1 / len(agents)
        share: dict = {k: process[k] * w for k in ("cpu_s", "cpu_user_s", "cpu_system_s")}
        if "cpu_split_s" in process:
            share["cpu_split_s"] = {k: round(v * w, 6) for k, v in process["cpu_split_s"].items()}
        if "instrumented" in process:
            share["instrumented"] = process["instrumented"]
        share["wakeups"] = process["wakeups"]
        share["process"] = {"hosts": [a.cfg["host"] for a in agents], "cpu_s": round(process["cpu_s"], 6)}
        out.append(share)
    return out


def main(argv: list[str] | None = None) -> None:
    """python -m traffic.agent CONFIG.json [CONFIG.json ...]: play the hosts
    the configurations name, each one's sockets made in the network
    namespace its `netns` names (none: where this process runs)."""
    argv = sys.argv[1:] if argv is None else argv
    roce.scapy_layers()  # before the first template, which may be built mid-run
    agents = []
    for path in argv:
        with open(path) as fh:
            cfg = json.load(fh)
        with netns.entered(cfg.get("netns")):
            agents.append(Agent(cfg))
    try:
        # The agent stands in for NIC hardware: let it preempt ordinary
        # processes so its pacing stays on time (Open vSwitch runs at -10).
        os.nice(-5)
    except OSError:
        pass
    stop = []

    def on_signal(signum: int, frame: object) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Set up the switches' entries for every path now (see Sender.warm);
    # a job that starts later warms its paths again just before, since
    # idle entries expire. Then tell the runner we are set up, and wait for
    # the common start time.
    for agent in agents:
        for job in agent.jobs:
            agent.sender.warm(job)
        print(json.dumps({"event": "ready", "host": agent.cfg["host"]}), flush=True)
    line = sys.stdin.readline()
    if not line:
        return  # the runner went away before the start
    start_at = json.loads(line)["start_at"]
    for agent in agents:
        agent.set_start(start_at)
    # What was made to set up (schedules, templates, sockets) lives as long
    # as the process: the garbage collector need not walk it again. And what
    # the loop makes is freed as it goes (little of it in cycles: the scapy
    # build of a new template), so the collector comes every 10,000 objects
    # kept rather than every 700: in a 64-rank ring it had taken 7% of an
    # agent process's CPU, and 1% after.
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    if os.environ.get("HPNLAB_PROFILE"):  # developer aid: where the agent's CPU goes
        import cProfile

        prof = cProfile.Profile(time.process_time)
        process = prof.runcall(play, agents, lambda: bool(stop))
        prof.dump_stats(agents[0].cfg["out"] + ".prof")
        process["instrumented"] = "profile"
    else:
        process = play(agents, lambda: bool(stop))
    for agent, extra in zip(agents, shares(agents, process)):
        out = agent.results(extra)
        tmp = agent.cfg["out"] + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(out, fh, indent=1)
        os.replace(tmp, agent.cfg["out"])
        agent.sender.close()


if __name__ == "__main__":
    main()
