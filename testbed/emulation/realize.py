"""Realize a Fabric model as a running emulation: Mininet hosts, Open vSwitch
bridges (kernel datapath where the module exists, userspace otherwise), HTB
shaping at the scaled rates, and the HPN controller.

`FabricNet` is a context manager; whatever happens (Ctrl-C, an exception
half-way through building) its exit removes exactly what the ledger
recorded.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from . import (
    capabilities,
    jobchannel,
    mininet_model,
    named,
    neighbours,
    netlink,
    ovs_pacing,
    plans,
    reachability,
)
from .controller import ControllerProcess
from .hostroutes import HostRoutes
from .hostrun import first_failure, run_in_hosts
from .ledger import SYSCTL_ROOT, Ledger, already_present, read_sysctl
from .pause_process import PauseProcess
from .procs import signals_held
from .queues import QueueEngine, parse_ifindexes
from .rundir import make_private_dir, write_private

# The interface group of one end of each of a fabric's cables (`ip link
# show group 4739`), in the switches' namespace: what teardown deletes in
# one request. One fabric at a time per namespace (named ones have their own).
LINK_GROUP = 4739


class CapabilityError(RuntimeError):
    pass


class NameTakenError(RuntimeError):
    """A bridge or interface the fabric needs already exists on this machine."""


JOBS_SOCKET = "jobs.sock"  # the controller's job channel, in the run directory
# Where the switches reach the controller: a Unix socket in a folder only
# root may enter, under Open vSwitch's run directory (the only place its
# switches connect to a socket controller: anywhere else it refuses, for
# fear of a socket someone else placed).
OPENFLOW_SOCKET = "of.sock"
# How long the switches may take to connect and acknowledge their routes:
# about 1 s natively, 15-17 s for 12 switches on the kernel datapath in a
# VM under software emulation, which once took more than 30 s.
ROUTE_TIMEOUT_S = 60.0
# How long a host pair may go unanswered on a fabric just brought up before
# it counts as unreachable: the first packets of each flow go up to Open
# vSwitch's daemon, which in a VM under software emulation left 27 of 112
# pairs of an 8-host fabric unanswered within 5 s; there the slowest first
# answer took 0.6-1.4 s once the probers spaced their resends out, natively
# under 50 ms. A fabric that answers costs no more than its answers.
BRINGUP_REACH_TIMEOUT_S = 30.0
# How long a teardown's steps may take before the rest is left to the
# ledger's sweep (each step bounds its own waits; this bounds their sum).
TEARDOWN_DEADLINE_S = 60.0


def saying_never_fails(log):
    """`log`, made unable to stop what calls it: once whoever read the
    output has gone (a parent killed, a closed pipe), a line is dropped,
    and a teardown goes on to remove everything it recorded."""

    def say(message):
        try:
            log(message)
        except OSError:
            pass

    return say


class FabricNet:
    def __init__(
        self, fabric, run_dir, log=print, feats=None, route_timeout=ROUTE_TIMEOUT_S, ovs_options=None
    ):
        self.fabric = fabric
        self.run_dir = run_dir
        self.log = saying_never_fails(log)
        self.feats = feats
        self.route_timeout = route_timeout
        self.ovs_options = dict(ovs_options or {})  # Open vSwitch other_config for this run, put back after
        self.net = None
        self.controller = None
        self.ledger = None
        self.datapath = None
        self.queues = None  # QueueEngine when the fabric has priority classes
        self.pauses = None  # PauseProcess when a class is lossless
        self.host_routes = HostRoutes(self.netns_of)
        self.links_ns: netlink.Namespace | None = None  # what faults pull cables through, from bring-up
        self.of_dir = None  # the folder of the controller's OpenFlow socket
        self.gap_file = None  # where Open vSwitch's pacer reads this fabric's gap (userspace datapath)
        self.timings = {}

    # --- bring-up ----------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        t0 = time.monotonic()
        self._check_machine()
        self._claim()
        self._start_controller_process()
        self._build_net()
        self.timings["mininet_build"] = time.monotonic() - t0
        self.net.build()
        self.net.start()
        self.timings["mininet_start"] = time.monotonic() - t0
        self._configure_switch_ports()
        self._connect_switches()
        self._configure_hosts()
        self.host_routes.open(h.name for h in self.fabric.hosts())
        # opened now: a fault's first cable must not wait for a socket
        self.links_ns = netlink.Namespace(None)  # the switches' namespace, this process's
        self._group_links()
        if self.queues is not None:
            self._attach_queue_engine()
        self.timings["configured"] = time.monotonic() - t0
        f, n = self.fabric, len(self.fabric.switches())
        self.controller.wait_for(
            lambda e: e["event"] == "routes",
            self.route_timeout,
            f"all {n} switches to connect and acknowledge their routes",
        )
        self.timings["routes"] = time.monotonic() - t0
        self._pace_switch_daemon()
        self.log(
            f"fabric {f.name}: {len(f.hosts())} hosts, {n} switches ({self.datapath} "
            f"datapath), {len(f.links)} links up in {self.timings['routes']:.1f} s"
        )
        return self

    def _check_machine(self):
        """Refuse a fabric this kernel cannot emulate; choose the datapath;
        warn where Open vSwitch's buffers are smaller than the model needs."""
        feats = self.feats if self.feats is not None else capabilities.probe()
        missing = capabilities.missing_for(self.fabric, feats)
        if missing:
            raise CapabilityError(missing[0])
        self.datapath = capabilities.datapath(feats)
        self.run_dir = make_private_dir(self.run_dir)  # before anything is built or claimed
        for small in [f for f in feats if f.name in capabilities.SMALL_OVS_BUFFERS and not f.present]:
            self.log(
                f"warning: {small.name}: {small.detail}: Open vSwitch may drop packets no "
                "modeled queue dropped (run make setup while no fabric is up)"
            )
        costly = (capabilities.OVS_MALLOC_FEATURE, capabilities.OVS_PACER_FEATURE)
        for slow in [f for f in feats if f.name in costly and not f.present]:
            self.log(
                f"warning: {slow.name}: {slow.detail}: each packet-hop costs Open vSwitch "
                "more CPU, so the machine emulates less (run make setup while no fabric is up)"
            )

    def _claim(self):
        """Claim the machine in the ledger and record every name before
        creating it, so a crash half-way through still leaves a complete
        list for the sweep."""
        ledger = Ledger()
        ledger.claim(self.fabric.name, self.run_dir)  # refuses if another fabric runs
        self.ledger = ledger
        if named.current():  # a fabric beside others: its own Open vSwitch
            named.start_switch_daemons(ledger)
        f = self.fabric
        bridges = [s.name for s in f.switches()]
        interfaces = [e.ifname for l in f.links for e in (l.a, l.b)]
        taken = already_present(bridges, interfaces)
        if taken:  # never build over (and later remove) what someone else made
            raise NameTakenError(
                f"{taken}; hpnlab did not create it and will not replace it: "
                "remove or rename it, then try again"
            )
        self.ledger.add("bridges", *bridges)
        self.ledger.add("interfaces", *interfaces)
        for key, value in self.ovs_options.items():
            self.ledger.set_ovs_option(key, value)
        if self.datapath == "user":  # recorded now, written once the fabric stands
            self.gap_file = capabilities.ovs_pass_gap_file()
            if os.path.lexists(self.gap_file):  # left by a fabric that died unswept
                os.unlink(self.gap_file)
            self.ledger.add("files", self.gap_file)
        try:
            soft, hard = (int(read_sysctl(k)) for k in (neighbours.GC_SOFT, neighbours.GC_HARD))
        except OSError:  # only the machine's first namespace has them: a named fabric runs in its own
            soft = hard = None
        if soft is not None and hard is not None:
            for key, value in neighbours.limits(neighbours.entries(f), soft, hard).items():
                try:
                    self.ledger.set_sysctl(key, value)
                except OSError as e:  # e.g. a read-only /proc/sys: the fabric still comes up
                    self.log(
                        f"warning: could not raise {key} to {value} ({e}): the hosts of a fabric "
                        "this size may find the kernel's ARP table full"
                    )
        if f.queues is not None:
            self.queues = QueueEngine(f, self.ledger)
            self.queues.prepare()

    def _pace_switch_daemon(self):
        """Tell Open vSwitch's pacer the gap between passes this fabric
        allows (ovs_pacing.py), once it stands: bring-up's many
        reconfigurations are not paced. One fabric at a time uses a daemon
        (the claim), so the file is this one's; teardown removes it first,
        and the pacer reads no file as no pacing."""
        if self.gap_file is not None:
            write_private(self.gap_file, f"{ovs_pacing.pass_gap_us(self.fabric)}\n")

    def _unpace_switch_daemon(self):
        if self.gap_file is not None and os.path.lexists(self.gap_file):
            os.unlink(self.gap_file)

    def _start_controller_process(self):
        """The controller, listening on a Unix socket in a folder only root
        may enter, with the fabric's model written beside the run."""
        fabric_json = os.path.join(self.run_dir, "fabric.json")
        write_private(fabric_json, json.dumps(self.fabric.to_dict(), indent=1))
        self.of_dir = of_dir = tempfile.mkdtemp(prefix="hpnlab-", dir=capabilities.ovs_rundir())
        self.ledger.add("dirs", of_dir)
        self.controller = ControllerProcess(
            fabric_json,
            os.path.join(self.run_dir, "controller.log"),
            listen=os.path.join(of_dir, OPENFLOW_SOCKET),
            on_routes=self.host_routes.apply,
            on_exit=self._controller_exited,
            jobs_socket=os.path.join(self.run_dir, JOBS_SOCKET),
        )
        self.ledger.add_process(self.controller.start(), self.controller.argv)

    def _build_net(self):
        """The Mininet model (mininet_model.populate), each host shell's PID
        recorded: it holds the host's namespace. The network is kept before
        it is filled: a failure half-way through still stops it."""

        def record(host, pid):
            self.ledger.add_process(pid, ["bash"], host=host)

        self.net = mininet_model.new_net()
        mininet_model.populate(self.net, self.fabric, self.datapath, record)

    def _switch_ports(self):
        """Every switch-side interface of the fabric's links."""
        f = self.fabric
        return [e.ifname for l in f.links for e in (l.a, l.b) if f.nodes[e.node].is_switch]

    def _rps_mask(self):
        """Receive steering on every datapath (see plans.steering_script).
        The userspace datapath reads its ports in one thread, but what it
        sends still leaves through shaped qdiscs that the timer's softirq
        may dequeue on another CPU, and a host's egress qdisc is dequeued
        by whichever of its senders holds it: a connection's frames then
        wait on two CPUs' backlogs. bench/reorder.py measures it: two
        senders on two CPUs through one HTB into a veth, 24-41 frames of
        174,000 late per run without steering, none with it."""
        return plans.cpu_mask(os.cpu_count() or 1)

    def _configure_switch_ports(self):
        ip_lines, tc_lines = plans.switch_port_plan(self.fabric, self.queues)
        _batch(["ip", "-batch", "-"], ip_lines)
        _batch(["tc", "-batch", "-"], tc_lines)
        mask = self._rps_mask()
        if mask is not None:
            r = subprocess.run(
                ["sh", "-e"],
                input=plans.steering_script(self._switch_ports(), mask) + "\n",
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                raise RuntimeError(f"steering the switch ports' receive queues failed: {r.stderr.strip()}")

    def _configure_hosts(self):
        """Run each host's script (plans.host_script) in its namespace, all
        hosts at once. The script travels as an argument, never as a file
        that is run by path, and no path enters a shell: nothing can swap
        it or break its command line. A copy is kept for people to read."""
        commands = {}
        # One list for the whole machine, readable from any namespace.
        tcp_default = plans.host_tcp_default(read_sysctl("net/ipv4/tcp_allowed_congestion_control").split())
        keep_neighbours = os.path.exists(os.path.join(SYSCTL_ROOT, plans.ARP_EVICT_NOCARRIER))
        if tcp_default is None:
            self.log(
                "warning: the machine allows neither CUBIC nor Reno as a namespace's default "
                "congestion control: the hosts' TCP starts with the machine's default, and if "
                "that paces (BBR), the pacing stays on after iperf3 switches to CUBIC"
            )
        for h in self.fabric.hosts():
            script = plans.host_script(
                self.fabric,
                h.name,
                self.queues,
                self._rps_mask(),
                tcp_default=tcp_default,
                keep_neighbours=keep_neighbours,
            )
            write_private(os.path.join(self.run_dir, f"host-{h.name}.sh"), script)
            commands[h.name] = (["bash", "-c", script], None)
        failed = first_failure(run_in_hosts(self.ns_argv, commands), "configuring the host")
        if failed:
            raise RuntimeError(failed)

    def _attach_queue_engine(self):
        """Load the queue engine on every port (hosts' from this mount
        namespace, see QueueEngine.port_lines) and fill its maps."""
        f = self.fabric
        switch_ifs = self._switch_ports()
        _batch(["tc", "-batch", "-"], self.queues.attach_lines(switch_ifs))
        ifindex = {i: socket.if_nametoindex(i) for i in switch_ifs}
        ports = {h.name: [p for nic in f.nics_of(h.name) for p in nic.ports] for h in f.hosts()}
        load = ["sh", "-c", "tc -batch - && ip -o link show"]
        commands = {h: (load, _lines(self.queues.attach_lines(p, host=True))) for h, p in ports.items()}
        ran = run_in_hosts(self.ns_argv, commands)
        failed = first_failure(ran, "attaching the queue engine")
        if failed:
            raise RuntimeError(failed)
        for host, r in ran.items():
            listed = parse_ifindexes(r.stdout)
            ifindex.update({p: listed[p] for p in ports[host]})
        self.queues.configure(ifindex)
        if f.queues.lossless:
            netns = {p: self.netns_of(h) for h, on in ports.items() for p in on}
            self.pauses = PauseProcess(self.queues.pause_targets(ifindex, netns), self.run_dir)
            self.ledger.add_process(self.pauses.start(), self.pauses.argv)

    @property
    def route_errors(self):
        """Host-route updates that failed (they fail the run)."""
        return self.host_routes.errors

    # --- checks ------------------------------------------------------------
    def check_reachability(self, timeout=BRINGUP_REACH_TIMEOUT_S):
        """{host: {"ifname:ip": rtt_ms|None}} (see reachability.check)."""
        t0 = time.monotonic()
        try:
            return reachability.check(self.fabric, self.ns_argv, timeout)
        finally:
            self.timings["reachability"] = time.monotonic() - t0

    # --- helpers -----------------------------------------------------------
    def host_pid(self, host):
        return self.net.get(host).pid

    def netns_of(self, host):
        return f"/proc/{self.host_pid(host)}/ns/net"

    def ns_argv(self, host, argv):
        """argv run inside `host`'s network namespace (thread-safe: does not
        use the host's interactive shell)."""
        return ["nsenter", f"--net={self.netns_of(host)}"] + list(argv)

    def run_in(self, host, argv, input=None, check=True):
        r = subprocess.run(self.ns_argv(host, argv), input=input, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {host} failed: {r.stderr.strip()}")
        return r

    def popen_in(self, host, argv, **kw):
        proc = subprocess.Popen(self.ns_argv(host, argv), **kw)
        self.ledger.add_process(proc.pid, argv)  # nsenter execs argv: that is what runs
        return proc

    def wait_listening(self, host, port, server=None, timeout=10.0):
        """Until a TCP socket listens on `port` in `host` (the event a client
        needs: connecting before it is refused), seen with ss and polled;
        raises at once if `server`, the process meant to listen, has exited."""
        deadline = time.monotonic() + timeout
        while not self.run_in(host, ["ss", "-Hltn", f"sport = :{port}"], check=False).stdout.strip():
            if server is not None and server.poll() is not None:
                status = server.returncode
                raise RuntimeError(f"the server in {host} exited (status {status}) before it listened")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port} in {host} after {timeout:g} s")
            time.sleep(0.02)

    # --- the controller going away and coming back ---------------------------
    def _connect_switches(self):
        """Point every switch at the controller's Unix socket (only root can
        reach it: controllers/run.py), all in one transaction."""
        argv = mininet_model.connect_argv(self.fabric.switches(), self.controller.target)
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"connecting the switches to the controller failed: {r.stderr.strip()}")

    def _controller_exited(self, event):
        """Said at once, from the reader thread: after this, nothing reroutes."""
        if not event["asked"]:
            self.log(
                f"the controller exited (status {event['code']}); the switches keep "
                f"their routes, but nothing reroutes until it is back "
                f"(log: {self.controller.log_path})"
            )

    def stop_controller(self):
        """Stop the controller (its PID, as recorded) and wait until it is gone."""
        self.controller.stop()

    def start_controller(self):
        """Start the controller again on the same port; returns the index of
        its first event, to wait on what it does from then on."""
        since = len(self.controller.events)
        self.ledger.add_process(self.controller.start(), self.controller.argv)
        return since

    def announce_jobs(self, jobs, timeout=30.0):
        """Tell the controller the drill's jobs (testbed/drill/announce.py);
        returns its answer once every switch acknowledged what it installed."""
        return jobchannel.announce(self.controller.jobs_socket, jobs, timeout)

    def _remove_job_channel(self):
        """The socket and the jobs the controller kept beside it (for its own
        restarts): they belong to one run only."""
        path = os.path.join(self.run_dir, JOBS_SOCKET)
        for p in (path, path + ".json"):
            if os.path.lexists(p):
                os.unlink(p)

    def _cable_end(self, link):
        """The end of `link` a cable is pulled at: a switch's, in this namespace."""
        return link.b if self.fabric.nodes[link.b.node].is_switch else link.a

    def _grouped_ends(self):
        """The interfaces of the fabric's cable group: each cable's end in this namespace."""
        ends = (self._cable_end(link) for link in self.fabric.links)
        return {end.ifname for end in ends if self.fabric.nodes[end.node].is_switch}

    def _group_links(self):
        """One end of each cable in the fabric's interface group, so that
        teardown deletes them all at once (see _delete_links)."""
        for ifname in self._grouped_ends():
            self.links_ns.set_group(ifname, LINK_GROUP)

    def set_link(self, link, up):
        """Pull or replug a cable (see set_links)."""
        self.set_links([link], up)

    def set_links(self, links, up):
        """Pull or replug cables, all at once: set one switch-side end of
        each link down or up, back to back over one netlink socket (a switch
        that fails loses its links together). The far end loses (regains)
        carrier, as with a real cable, so a host sees its port go `linkdown`
        and keeps its addresses and routes (an admin-down on the host side
        would make the kernel delete them)."""
        if self.links_ns is None:
            raise RuntimeError("no fabric is up: there is no cable to pull")
        done = []
        try:
            for link in links:
                self.links_ns.set_up(self._cable_end(link).ifname, up)
                done.append(link)
        finally:
            if self.queues is not None and done:  # the kernel flushed both ends' queues
                self.queues.reset([e.ifname for link in done for e in (link.a, link.b)])

    def set_link_rate(self, link, share):
        """Degrade a link to `share` of its rate, both ways (1: restore it):
        the root class of each end's shaper, which every class of the port
        borrows from. Its queues keep their size in bytes, as a real
        switch's buffer does, so they hold longer at the lower rate."""
        rate = self.fabric.scaled_mbit(link) * share
        for end in (link.a, link.b):
            argv = ["tc", *plans.port_rate_line(end.ifname, rate, self.fabric.mtu).split()]
            if self.fabric.nodes[end.node].is_switch:
                r = subprocess.run(argv, capture_output=True, text=True)
            else:
                r = self.run_in(end.node, argv, check=False)
            if r.returncode != 0:
                raise RuntimeError(f"changing {end.ifname}'s rate failed: {r.stderr.strip()}")

    # --- teardown ----------------------------------------------------------
    def stop(self):
        # Ctrl-C or SIGTERM during teardown would leave half a fabric: hold
        # them until everything recorded is gone, then let them through.
        t0 = time.monotonic()
        try:
            with signals_held():
                return self._teardown()
        finally:
            self.timings["teardown"] = time.monotonic() - t0

    def _close_links_ns(self):
        if self.links_ns is not None:
            self.links_ns.close()
            self.links_ns = None

    def _teardown(self):
        """Each step on its own (one that fails or overruns does not stop
        the next), the ledger's sweep always last: it removes whatever the
        steps before left, by what was recorded."""
        deadline = time.monotonic() + TEARDOWN_DEADLINE_S
        took = self.timings["teardown_steps"] = {}  # seconds per step, for a slow machine's log
        steps = (
            ("pacer", self._unpace_switch_daemon),  # teardown's reconfigurations unpaced
            # the controller first: links going away must not make it reroute
            ("controller", self._stop_controller_for_good),
            ("host routes", self.host_routes.close),  # its sockets hold the hosts' namespaces
            ("links", self._delete_links),
            ("cable socket", self._close_links_ns),
            ("Mininet", self._stop_net),
            ("pause daemon", self._stop_pauses),
            ("queue engine", self._close_queues),
            ("Open vSwitch of the named fabric", self._stop_named_switches),
        )
        for what, step in steps:
            if time.monotonic() > deadline:
                self.log(
                    f"warning: teardown passed {TEARDOWN_DEADLINE_S:.0f} s; skipping to "
                    f"the sweep of what was recorded ({what} and later steps skipped)"
                )
                break
            began = time.monotonic()
            try:
                step()
            except Exception as e:  # noqa: BLE001 - the sweep below still runs
                self.log(f"warning: stopping the {what} failed: {type(e).__name__}: {e}")
            took[what] = time.monotonic() - began
        leftover = []
        if self.ledger is not None:
            began = time.monotonic()
            try:
                leftover = self.ledger.sweep()
            finally:
                took["sweep of what was recorded"] = time.monotonic() - began
                self.ledger.release()
                self.ledger = None
        return leftover

    def _delete_links(self):
        """Every cable at once: deleting one veth took the kernel about 20 ms
        (it waits out a grace period of RCU each time), so Mininet, one `ip
        link del` per link, spent 0.6 s on HPN-mini's 24; deleting the
        fabric's group waits once (0.04 s for 24). Only when every interface
        in the group is one of the fabric's: else Mininet deletes them as
        before."""
        if self.net is None or self.links_ns is None:
            return
        grouped = {name for name, group in self.links_ns.groups().items() if group == LINK_GROUP}
        if not grouped or not grouped <= self._grouped_ends():
            return
        self.links_ns.delete_group(LINK_GROUP)
        # Mininet would delete each again, one `ip` at a time, and fail
        self.net.links = [
            l for l in self.net.links if l.intf1.name not in grouped and l.intf2.name not in grouped
        ]

    def _stop_named_switches(self):
        if self.ledger is not None and self.ledger.data.get("named"):
            named.stop_switch_daemons(self.ledger)

    def _stop_controller_for_good(self):
        if self.controller is not None:
            controller, self.controller = self.controller, None
            controller.stop()
        if self.of_dir is not None:  # set once the run folder was made ours
            self._remove_job_channel()
            shutil.rmtree(self.of_dir, ignore_errors=True)

    def _stop_net(self):
        if self.net is not None:
            net, self.net = self.net, None
            net.stop()

    def _stop_pauses(self):
        if self.pauses is not None:
            pauses, self.pauses = self.pauses, None
            pauses.stop()

    def _close_queues(self):
        if self.queues is not None:
            queues, self.queues = self.queues, None
            queues.close()


def _batch(argv, lines):
    if not lines:
        return
    r = subprocess.run(argv, input=_lines(lines), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} -batch failed: {r.stderr.strip()}")


def _lines(lines):
    """A batch tool's input: one command a line."""
    return "\n".join(lines) + "\n"
