"""Realize a Fabric model as a running emulation: Mininet hosts, Open vSwitch
bridges (kernel datapath where the module exists, userspace otherwise), HTB
shaping at the scaled rates, and the HPN controller.

`FabricNet` is a context manager; whatever happens (Ctrl-C, an exception
half-way through building) its exit removes exactly what the ledger
recorded.
"""
import json
import os
import socket
import subprocess
import time

from . import capabilities, jobchannel, plans
from .controller import ControllerProcess
from .ledger import Ledger, already_present
from .procs import end, signals_held
from .pause_process import PauseProcess
from .queues import QueueEngine, parse_ifindexes


class CapabilityError(RuntimeError):
    pass


class NameTakenError(RuntimeError):
    """A bridge or interface the fabric needs already exists on this machine."""


def unreachable(reach):
    """'host ifname:ip' for every pair of check_reachability() with no reply."""
    return [f"{h} {pair}" for h, d in reach.items() for pair, rtt in d.items() if rtt is None]


JOBS_SOCKET = "jobs.sock"     # the controller's job channel, in the run directory
RECONNECT_MAX_MS = 1000     # a switch retries its lost controller at least every second
# How long the switches may take to connect and acknowledge their routes:
# about 1 s natively, 15-17 s for 12 switches on the kernel datapath in a
# VM under software emulation, which once took more than 30 s.
ROUTE_TIMEOUT_S = 60.0


class FabricNet:
    def __init__(self, fabric, run_dir, log=print, feats=None, route_timeout=ROUTE_TIMEOUT_S):
        self.fabric = fabric
        self.run_dir = run_dir
        self.log = log
        self.feats = feats
        self.route_timeout = route_timeout
        self.net = None
        self.controller = None
        self.ledger = None
        self.datapath = None
        self.queues = None           # QueueEngine when the fabric has priority classes
        self.pauses = None           # PauseProcess when a class is lossless
        self.overrides = {}          # host -> {dst ip: ports} applied now
        self.route_errors = []       # host-route updates that failed (fail the run)
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
        feats = self.feats if self.feats is not None else capabilities.probe()
        missing = capabilities.missing_for(self.fabric, feats)
        if missing:
            raise CapabilityError(missing[0])
        self.datapath = capabilities.datapath(feats)
        small = [f for f in feats if f.name == capabilities.OVS_TX_FEATURE and not f.present]
        if small:
            self.log(f"warning: {small[0].detail}: Open vSwitch will drop packets the modeled "
                     "queues would hold (run make setup while no fabric is up)")
        ledger = Ledger()
        ledger.claim(self.fabric.name, self.run_dir)   # refuses if another fabric runs
        self.ledger = ledger
        f = self.fabric
        bridges = [s.name for s in f.switches()]
        interfaces = [e.ifname for l in f.links for e in (l.a, l.b)]
        taken = already_present(bridges, interfaces)
        if taken:   # never build over (and later remove) what someone else made
            raise NameTakenError(f"{taken}; hpnlab did not create it and will not replace it: "
                                 "remove or rename it, then try again")
        # Record every name before creating it, so a crash half-way through
        # still leaves a complete list for the sweep.
        self.ledger.add("bridges", *bridges)
        self.ledger.add("interfaces", *interfaces)
        os.makedirs(self.run_dir, exist_ok=True)
        if f.queues is not None:
            self.queues = QueueEngine(f, self.ledger)
            self.queues.prepare()

        self._remove_job_channel()     # a previous run's, in a reused directory
        fabric_json = os.path.join(self.run_dir, "fabric.json")
        with open(fabric_json, "w") as fh:
            json.dump(f.to_dict(), fh, indent=1)
        self.controller = ControllerProcess(fabric_json, os.path.join(self.run_dir, "controller.log"),
                                            on_routes=self._apply_overrides,
                                            on_exit=self._controller_exited,
                                            jobs_socket=os.path.join(self.run_dir, JOBS_SOCKET))
        self.ledger.add_process(self.controller.start(), self.controller.argv)

        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host, OVSSwitch, RemoteController
        setLogLevel("error")  # Mininet warns before our controller listens
        self.net = net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                                 waitConnected=False, link=Link)
        net.addController(RemoteController("c0", ip="127.0.0.1", port=self.controller.port))
        for sw in f.switches():
            net.addSwitch(sw.name, cls=OVSSwitch, datapath=self.datapath, dpid=f"{sw.dpid:016x}",
                          protocols="OpenFlow13", failMode="secure")
        for h in f.hosts():
            node = net.addHost(h.name, cls=Host, ip=None)
            self.ledger.add_process(node.pid, ["bash"])  # its shell holds the namespace
        macs = {p: nic.mac for nic in f.nics for p in nic.ports}
        for link in f.links:
            addrs = {k: macs[e.ifname] for k, e in (("addr1", link.a), ("addr2", link.b))
                     if e.ifname in macs}
            net.addLink(link.a.node, link.b.node, port1=link.a.port, port2=link.b.port,
                        intfName1=link.a.ifname, intfName2=link.b.ifname, **addrs)
        self.timings["mininet_build"] = time.monotonic() - t0
        net.build()
        net.start()
        self.timings["mininet_start"] = time.monotonic() - t0
        self._configure_switch_ports()
        self._configure_reconnection()
        self._configure_hosts()
        if self.queues is not None:
            self._attach_queue_engine()
        self.timings["configured"] = time.monotonic() - t0
        n = len(f.switches())
        self.controller.wait_for(lambda e: e["event"] == "routes", self.route_timeout,
                                 f"all {n} switches to connect and acknowledge their routes")
        self.timings["routes"] = time.monotonic() - t0
        self.log(f"fabric {f.name}: {len(f.hosts())} hosts, {n} switches ({self.datapath} "
                 f"datapath), {len(f.links)} links up in {self.timings['routes']:.1f} s")
        return self

    def _switch_ports(self):
        """Every switch-side interface of the fabric's links."""
        f = self.fabric
        return [e.ifname for l in f.links for e in (l.a, l.b) if f.nodes[e.node].is_switch]

    def _rps_mask(self):
        """Receive steering for the kernel datapath only (see
        plans.steering_script): the userspace datapath reads every port in
        one thread, and on it steering would only add cross-CPU wake-ups."""
        if self.datapath != "kernel":
            return None
        return plans.cpu_mask(os.cpu_count() or 1)

    def _configure_switch_ports(self):
        ip_lines, tc_lines = plans.switch_port_plan(self.fabric, self.queues)
        _batch(["ip", "-batch", "-"], ip_lines)
        _batch(["tc", "-batch", "-"], tc_lines)
        mask = self._rps_mask()
        if mask is not None:
            r = subprocess.run(["sh", "-e"], input=plans.steering_script(self._switch_ports(), mask) + "\n",
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"steering the switch ports' receive queues failed: {r.stderr.strip()}")

    def _configure_hosts(self):
        hosts = [self.net.get(h.name) for h in self.fabric.hosts()]
        for h in hosts:  # all hosts work in parallel; collect afterwards
            script = os.path.join(self.run_dir, f"host-{h.name}.sh")
            with open(script, "w") as fh:
                fh.write(plans.host_script(self.fabric, h.name, self.queues, self._rps_mask()))
            h.sendCmd(f"bash {script}; echo HPNLAB_DONE $?")
        for h in hosts:
            out = h.waitOutput()
            if "HPNLAB_DONE 0" not in out:
                raise RuntimeError(f"configuring host {h.name} failed: {out.strip()[-300:]}")

    def _attach_queue_engine(self):
        """Load the queue engine on every port (hosts' from this mount
        namespace, see QueueEngine.port_lines) and fill its maps."""
        f = self.fabric
        switch_ifs = self._switch_ports()
        _batch(["tc", "-batch", "-"], self.queues.attach_lines(switch_ifs))
        ifindex = {i: socket.if_nametoindex(i) for i in switch_ifs}
        procs = {}
        for h in f.hosts():
            ports = [p for nic in f.nics_of(h.name) for p in nic.ports]
            procs[h.name] = (ports, subprocess.Popen(
                self.ns_argv(h.name, ["sh", "-c", "tc -batch - && ip -o link show"]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for host, (ports, proc) in procs.items():
            out, err = proc.communicate("\n".join(self.queues.attach_lines(ports, host=True)) + "\n")
            if proc.returncode != 0:
                raise RuntimeError(f"attaching the queue engine in {host} failed: {err.strip()[-300:]}")
            listed = parse_ifindexes(out)
            ifindex.update({p: listed[p] for p in ports})
        self.queues.configure(ifindex)
        if f.queues.lossless:
            netns = {p: f"/proc/{self.host_pid(h.name)}/ns/net"
                     for h in f.hosts() for nic in f.nics_of(h.name) for p in nic.ports}
            self.pauses = PauseProcess(self.queues.pause_targets(ifindex, netns), self.run_dir)
            self.ledger.add_process(self.pauses.start(), self.pauses.argv)

    # --- host-side route updates (called from the controller reader) -------
    def _apply_overrides(self, event):
        """Install the controller's host-route overrides in every host that
        needs a change, all hosts at once; stamp when they are in place.
        An `overrides` event comes as soon as the controller has computed a
        version, before the switches have it: only what narrows a host's
        choice is taken then (it only stops using ports that no longer
        reach); the `routes` event, once every switch confirmed, brings the
        rest (a port in use again)."""
        wanted = event.get("host_overrides", {})
        early = event.get("event") == "overrides"
        procs = {}
        for host in sorted(set(wanted) | set(self.overrides)):
            old = self.overrides.get(host, {})
            new = {ip: tuple(p) for ip, p in wanted.get(host, {}).items()}
            if early:
                new = plans.narrowed_overrides(old, new)
            lines = plans.override_lines(old, new)
            if lines:
                proc = subprocess.Popen(self.ns_argv(host, ["ip", "-batch", "-"]),
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
                procs[host] = (proc, "\n".join(lines) + "\n")
            self.overrides[host] = new
        for host, (proc, text) in procs.items():
            _, err = proc.communicate(text)
            if proc.returncode != 0:
                self.route_errors.append(f"host routes in {host} (routes version "
                                         f"{event.get('version')}): {err.strip()}")
        event["applied_t"] = time.monotonic()

    # --- checks ------------------------------------------------------------
    def check_reachability(self, timeout=5.0):
        """Every host to every other NIC of its rail, out of each of its
        ports, all hosts at once. Returns {host: {"ifname:ip": rtt_ms|None}}."""
        import sys
        prober = os.path.join(os.path.dirname(__file__), "probe.py")
        procs = {}
        for h in self.fabric.hosts():
            pairs = [f"{port}:{dst.ip}" for nic in self.fabric.nics_of(h.name) for port in nic.ports
                     for dst in self.fabric.nics if dst.host != h.name and dst.rail == nic.rail]
            procs[h.name] = subprocess.Popen(
                self.ns_argv(h.name, [sys.executable, prober, str(timeout)] + pairs),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = {}
        try:
            for host, proc in procs.items():
                out, err = proc.communicate(timeout + 10)
                if proc.returncode != 0:
                    raise RuntimeError(f"reachability probe in {host} failed: {err.strip()[-300:]}")
                results[host] = json.loads(out)
        finally:
            for proc in procs.values():   # on any failure or Ctrl-C: none is left running
                end(proc, 1.0)
        return results

    # --- helpers -----------------------------------------------------------
    def host_pid(self, host):
        return self.net.get(host).pid

    def ns_argv(self, host, argv):
        """argv run inside `host`'s network namespace (thread-safe: does not
        use the host's interactive shell)."""
        return ["nsenter", f"--net=/proc/{self.host_pid(host)}/ns/net"] + list(argv)

    def run_in(self, host, argv, input=None, check=True):
        r = subprocess.run(self.ns_argv(host, argv), input=input, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {host} failed: {r.stderr.strip()}")
        return r

    def popen_in(self, host, argv, **kw):
        proc = subprocess.Popen(self.ns_argv(host, argv), **kw)
        self.ledger.add_process(proc.pid, argv)   # nsenter execs argv: that is what runs
        return proc

    # --- the controller going away and coming back ---------------------------
    def _configure_reconnection(self):
        """Switches retry a lost controller connection with a backoff that
        grows to 8 s by default; cap it at 1 s so that a restarted
        controller is found within a second. While none is connected they
        keep their flows (fail-mode secure), so traffic goes on."""
        found = subprocess.run(["ovs-vsctl", "--bare", "--columns=_uuid", "find", "controller",
                                f"target=\"tcp:127.0.0.1:{self.controller.port}\""],
                               check=True, capture_output=True, text=True).stdout.split()
        if found:
            argv = ["ovs-vsctl"]
            for uuid in found:
                argv += ["--", "set", "controller", uuid, f"max_backoff={RECONNECT_MAX_MS}"]
            subprocess.run(argv, check=True, capture_output=True)

    def _controller_exited(self, event):
        """Said at once, from the reader thread: after this, nothing reroutes."""
        if not event["asked"]:
            self.log(f"the controller exited (status {event['code']}); the switches keep "
                     f"their routes, but nothing reroutes until it is back "
                     f"(log: {self.controller.log_path})")

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

    def set_link(self, link, up):
        """Pull or replug a cable: set one switch-side end of the link down or
        up. The far end loses (regains) carrier, as with a real cable, so a
        host sees its port go `linkdown` and keeps its addresses and routes
        (an admin-down on the host side would make the kernel delete them)."""
        end = link.b if self.fabric.nodes[link.b.node].is_switch else link.a
        subprocess.run(["ip", "link", "set", "dev", end.ifname, "up" if up else "down"],
                       check=True, capture_output=True)
        if self.queues is not None:   # the kernel flushed both ends' queues
            self.queues.reset([link.a.ifname, link.b.ifname])

    # --- teardown ----------------------------------------------------------
    def stop(self):
        # Ctrl-C or SIGTERM during teardown would leave half a fabric: hold
        # them until everything recorded is gone, then let them through.
        with signals_held():
            return self._teardown()

    def _teardown(self):
        leftover = []
        if self.controller is not None:
            # First, so that links going away do not make it recompute routes
            # into namespaces that are being torn down.
            self.controller.stop()
            self.controller = None
            self._remove_job_channel()
        if self.net is not None:
            try:
                self.net.stop()
            except Exception as e:  # the ledger sweep below still runs
                self.log(f"warning: Mininet stop: {e}")
            self.net = None
        if self.pauses is not None:
            self.pauses.stop()
            self.pauses = None
        if self.queues is not None:
            self.queues.close()
            self.queues = None
        if self.ledger is not None:
            leftover = self.ledger.sweep()
            self.ledger.release()
            self.ledger = None
        return leftover


def _batch(argv, lines):
    if not lines:
        return
    r = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} -batch failed: {r.stderr.strip()}")
