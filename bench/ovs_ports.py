#!/usr/bin/env python3
"""Open vSwitch's userspace datapath: CPU per packet-hop against the number
of ports it polls.

The userspace datapath (the one a kernel without the openvswitch module
allows) reads every ordinary port from its main thread, and each time that
thread wakes it polls every port of every bridge. When frames arrive one at
a time, as paced traffic does, each one wakes the thread for a whole pass.
If that is where the CPU goes, the cost of a packet-hop grows with the
ports that are merely present. This script measures it:

  a private Open vSwitch (its own ovsdb-server and ovs-vswitchd, userspace
  datapath) in a network namespace of its own, one bridge with a rule
  in_port=a -> b, and --idle N more veth ports on the bridge that carry
  nothing; a paced sender puts --pps frames of --frame bytes per second
  into port a for --seconds, and the receiving end of b counts what
  arrived. Per setting: ovs-vswitchd's CPU per frame forwarded, its main
  thread's wake-ups per frame, and its minor page faults per frame.

With --idle-on, the idle ports go elsewhere as well, one setting each: on
a second bridge of the same daemon (other-bridge: every bridge of the
userspace datapath shares one datapath, so are its ports polled too?) or
on a bridge of a second daemon of our own (other-daemon: what running
switches in several daemons would save). The CPU is then that of every
daemon of the setting together. Two userspace datapaths cannot share a
network namespace (each makes a tap device named ovs-netdev for its
datapath, and the second finds the name taken: its bridges fail to come
up), so the second daemon and its idle ports get a namespace of their
own. Every port added is checked to be up in its daemon (an OpenFlow
port number): a setting whose ports failed would measure nothing.

With --malloc-tunables the daemon runs a second time per setting with
glibc's heap trimming held off (GLIBC_TUNABLES), to see whether giving
memory back and taking it again between passes costs anything; with
--preload LIBRARY, once more with that library preloaded into the daemon
(another allocator, such as jemalloc).

With --port-type, the bridge's ports are of another kind this Open
vSwitch offers as well, one setting each: afxdp-nonpmd (the daemon's main
thread reads and writes them through AF_XDP sockets; --xdp-mode sets how
their XDP program attaches, and a veth of MTU 9000 takes only the generic
mode) or afxdp (busy-polling threads of their own, which hold a core
whether frames come or not), or dpdk-pcap: ports of a DPDK build of the
daemon (ovs-vswitchd-dpdk, Debian's openvswitch-switch-dpdk, run without
huge pages), each a libpcap device on the veth (net_pcap), read by a
polling thread that sleeps up to --pmd-maxsleep us when few frames come
(other_config:pmd-maxsleep) and sends through a packet socket. Such a
daemon spends CPU while nothing flows: the "idle" column is its share of a
core before the frames start, and its us/frame includes it. The out port
has a queue (a pfifo qdisc, as every switch port of a fabric has one): the
"via queue" column is the share of the frames forwarded that went through
it. After the frames,
the far end of the out port is set down: "sees down" says whether the
daemon then reported that port's link down within 2 s (a fabric's fast
failover and its controller act on that report).

The reference beside it is hpnlab's raw sender's CPU per frame on a veth
pair (bench/generator.py), measured in the same run: a CPU figure moves
threefold between machines of one kind, a ratio does not.

Nothing is left behind: the namespace ends with the script, the daemons are
ended by PID and their folder removed. Needs root and Open vSwitch's
programs (not the system's daemons: this uses its own).

    sudo .venv/bin/python bench/ovs_ports.py [--idle 0,8,16,32] [--pps 3000]
        [--malloc-tunables] [--preload LIBRARY] [--port-type system,afxdp-nonpmd]
        [--xdp-mode generic] [--frame BYTES] [--pmd-maxsleep US]
"""

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from testbed.emulation.ledger import stat_fields, wait_until  # noqa: E402

INSIDE_ENV = "HPNLAB_BENCH_OVS_PORTS_INSIDE"
MTU = 9000
DPDK_VSWITCHD = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
DPDK_PORTS_MAX = 32  # RTE_MAX_ETHPORTS of Debian's DPDK build: a 33rd device is refused
DPDK_MEMORY_MB = 1024  # without huge pages, the memory DPDK takes for its packet buffers
TRIM_OFF = "glibc.malloc.trim_threshold=1073741824:glibc.malloc.top_pad=67108864"


def sh(*argv, env=None, check=True):
    r = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r


def read_int(path):
    with open(path) as fh:
        return int(fh.read())


def counters(pid):
    """(CPU seconds, minor faults, main thread's voluntary context switches)."""
    fields = stat_fields(pid)
    if fields is None:
        raise RuntimeError(f"ovs-vswitchd (pid {pid}) is gone")
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    sleeps = 0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches:"):
                sleeps = int(line.split()[1])
    return cpu, int(fields[7]), sleeps


class PrivateSwitch:
    """ovsdb-server and ovs-vswitchd of our own, in a folder only root can
    enter; ended by PID."""

    def __init__(self, tunables=None, preload=None, netns=None, dpdk_maxsleep=None):
        self.folder = tempfile.mkdtemp(prefix="hpnlab-ovs-ports-")
        self.env = dict(os.environ, OVS_RUNDIR=self.folder, OVS_DBDIR=self.folder, OVS_LOGDIR=self.folder)
        self.pids = []
        self.netns = netns  # the daemons run there (made and removed by the caller)
        f = self.folder
        try:
            sh("ovsdb-tool", "create", f"{f}/conf.db", env=self.env)
            self._daemon("ovsdb-server", f"{f}/conf.db", f"--remote=punix:{f}/db.sock")
            sh("ovs-vsctl", "--timeout=10", "--no-wait", "init", env=self.env)
            vswitchd = "ovs-vswitchd"
            if dpdk_maxsleep is not None:
                # No huge pages (a laptop has none set aside), no PCI scan;
                # DPDK's run folder is named after ours, inside this
                # script's own /run.
                extra = (
                    f"--no-huge --legacy-mem -m {DPDK_MEMORY_MB} --no-pci --file-prefix={os.path.basename(f)}"
                )
                sh(
                    "ovs-vsctl", "--timeout=10", "--no-wait", "set", "Open_vSwitch", ".",
                    "other_config:dpdk-init=true", f"other_config:dpdk-extra={json.dumps(extra)}",
                    f"other_config:pmd-maxsleep={dpdk_maxsleep}", env=self.env,
                )  # fmt: skip
                vswitchd = DPDK_VSWITCHD
            env = dict(self.env, GLIBC_TUNABLES=tunables) if tunables else dict(self.env)
            if preload:
                env["LD_PRELOAD"] = preload
            self._daemon(vswitchd, f"unix:{f}/db.sock", env=env)
        except BaseException:
            self.close()
            raise
        self.vswitchd = self.pids[-1]

    def _daemon(self, name, *args, env=None):
        where = ["ip", "netns", "exec", self.netns] if self.netns else []
        sh(*where, name, *args, "--pidfile", "--log-file", "--detach", env=env or self.env)
        self.pids.append(read_int(os.path.join(self.folder, f"{os.path.basename(name)}.pid")))

    def vsctl(self, *args):
        return sh("ovs-vsctl", "--timeout=20", *args, env=self.env)

    def ofctl(self, *args):
        return sh("ovs-ofctl", *args, env=self.env)

    def check_ports(self, names):
        """Raise unless every port named is up in the datapath: ovs-vsctl
        succeeds even when the daemon could not set a port up (its ofport
        is then -1, or empty while the daemon has no datapath at all)."""
        rows = self.vsctl("--format=csv", "--no-headings", "--columns=name,ofport", "list", "Interface")
        ofport = dict(line.split(",", 1) for line in rows.stdout.split())
        failed = [n for n in names if not ofport.get(n, "").isdigit() or int(ofport[n]) < 1]
        if failed:
            raise RuntimeError(
                f"ports not set up by ovs-vswitchd (see its log in {self.folder}): {', '.join(failed)}"
            )

    def close(self):
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.folder, ignore_errors=True)


def veth(a, b, netns=None):
    """A veth pair, both ends up; `a` moved into `netns` when given."""
    sh("ip", "link", "add", a, "mtu", str(MTU), "type", "veth", "peer", "name", b, "mtu", str(MTU))
    if netns:
        sh("ip", "link", "set", a, "netns", netns)
        sh("ip", "-n", netns, "link", "set", a, "up")
    else:
        sh("ip", "link", "set", a, "up")
    sh("ip", "link", "set", b, "up")


def queued(ifname):
    """Packets the root qdisc of `ifname` has sent."""
    rows = json.loads(sh("tc", "-s", "-j", "qdisc", "show", "dev", ifname, "root").stdout)
    return sum(r.get("packets", 0) for r in rows)


def frame(size):
    """An Ethernet/IPv4/UDP frame of `size` bytes that nothing answers."""
    payload = size - 14 - 20 - 8
    src, dst = socket.inet_aton("10.77.0.1"), socket.inet_aton("10.77.0.2")
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + payload, 0, 0x4000, 64, 17, 0, src, dst)
    udp = struct.pack("!HHHH", 49152, 4791, 8 + payload, 0)
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + ip + udp + bytes(payload)


PLACES = ("bridge", "other-bridge", "other-daemon")
PORT_TYPES = ("system", "afxdp-nonpmd", "afxdp", "dpdk-pcap")
POLLING = ("afxdp", "dpdk-pcap")  # read by threads that poll: the daemon is never idle
OTHER_NETNS = "hpnlab-ovs-ports-other"  # inside this script's own mount namespace: seen nowhere else
WARM_UP = 200  # frames sent before measuring
SETTLE_S = 0.5  # the window over which a daemon must be idle before measuring
IDLE_SHARE = 0.05  # idle: below this share of a core (the CPU clock ticks every 10 ms)


def settle(pids, polling=False, timeout=30.0):
    """Wait until the daemons are idle (less than IDLE_SHARE of a core over
    SETTLE_S, no frame flowing): one that has just started, or just added
    ports, keeps working for a while after ovs-vsctl returns, and that work
    is no frame's cost. Daemons whose threads poll never fall that low:
    for them, wait until two windows in a row cost the same within
    IDLE_SHARE. Returns the last window's share of a core."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        cpu0 = sum(counters(pid)[0] for pid in pids)
        time.sleep(SETTLE_S)
        busy = (sum(counters(pid)[0] for pid in pids) - cpu0) / SETTLE_S
        if busy < IDLE_SHARE or (polling and last is not None and abs(busy - last) < IDLE_SHARE):
            return busy
        last = busy
        if time.monotonic() > deadline:
            raise RuntimeError(f"Open vSwitch still busy after {timeout:g} s ({busy:.0%} of a core)")


def measure(
    idle,
    pps,
    seconds,
    size,
    tunables=None,
    preload=None,
    place="bridge",
    port_type="system",
    xdp_mode="best-effort",
    pmd_maxsleep=500,
):
    """One setting: the CPU (us) of every ovs-vswitchd of the setting, their
    main threads' wake-ups and their minor page faults, per frame forwarded.
    The idle ports sit on the forwarding bridge (`place` "bridge"), on a
    second bridge of the same daemon ("other-bridge") or on a bridge of a
    second daemon ("other-daemon")."""
    maxsleep = pmd_maxsleep if port_type == "dpdk-pcap" else None
    switches = [PrivateSwitch(tunables, preload, dpdk_maxsleep=maxsleep)]
    made = []
    netns = OTHER_NETNS if place == "other-daemon" else None
    try:
        if netns:
            sh("ip", "netns", "add", netns)
            sh("ip", "-n", netns, "link", "set", "lo", "up")
            switches.append(PrivateSwitch(tunables, preload, netns, dpdk_maxsleep=maxsleep))
        sw, idle_sw = switches[0], switches[-1]
        idle_br = "br0" if place == "bridge" else "br1"
        bridges = [(sw, "br0")] + ([(idle_sw, idle_br)] if place != "bridge" else [])
        for s, br in bridges:
            s.vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev", "fail_mode=secure")
        for a, b in (("pa", "ha"), ("pb", "hb")):
            made.append(a)
            veth(a, b)
        devices = itertools.count()  # a DPDK device's name is unique in its daemon

        def kind(port):
            if port_type == "dpdk-pcap":
                devargs = f"net_pcap{next(devices)},iface={port}"
                return ["type=dpdk", f"mtu_request={MTU}", f"options:dpdk-devargs={devargs}"]
            return [f"type={port_type}"] + ([] if port_type == "system" else [f"options:xdp-mode={xdp_mode}"])

        sw.vsctl("add-port", "br0", "pa", "--", "set", "interface", "pa", "ofport_request=1", *kind("pa"))
        sw.vsctl("add-port", "br0", "pb", "--", "set", "interface", "pb", "ofport_request=2", *kind("pb"))
        for i in range(idle):
            made.append(f"hi{i}")  # the end that stays here
            veth(f"pi{i}", f"hi{i}", netns)
            idle_sw.vsctl("add-port", idle_br, f"pi{i}", "--", "set", "interface", f"pi{i}", *kind(f"pi{i}"))
        sw.check_ports(["pa", "pb"])
        idle_sw.check_ports([f"pi{i}" for i in range(idle)])
        sw.ofctl("add-flow", "br0", "in_port=1,actions=output:2")
        # A queue on the out port, as every switch port of a fabric has:
        # its counter says whether the daemon's transmit went through it.
        sh("tc", "qdisc", "replace", "dev", "pb", "root", "pfifo", "limit", "1000")
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind(("ha", 0))
        data = frame(size)

        def received():
            return read_int("/sys/class/net/hb/statistics/rx_packets")

        rx0 = received()
        for _ in range(WARM_UP):  # the datapath learns its flow
            tx.send(data)
        if not wait_until(lambda: received() - rx0 >= WARM_UP, 10.0, step=0.01):
            raise RuntimeError(
                f"the warm-up frames ({size} bytes) did not cross the bridge's {port_type} ports in 10 s"
            )
        idle_share = settle([s.vswitchd for s in switches], polling=port_type in POLLING)
        rx0, queued0 = received(), queued("pb")
        before = [counters(s.vswitchd) for s in switches]
        t0 = time.monotonic()
        gap = 1.0 / pps
        due = t0
        sent = 0
        while due < t0 + seconds:
            tx.send(data)
            sent += 1
            due += gap
            rest = due - time.monotonic()
            if rest > 0:
                time.sleep(rest)
        wait_until(lambda: received() - rx0 >= sent, 10.0, step=0.01)  # the last frames cross (or were lost)
        after = [counters(s.vswitchd) for s in switches]
        got = received() - rx0
        through_queue = queued("pb") - queued0
        tx.close()
        if got <= 0:
            raise RuntimeError("no frame crossed the bridge")
        sh("ip", "link", "set", "hb", "down")  # the cable at the out port's far end pulled
        sees_down = wait_until(
            lambda: sw.vsctl("get", "interface", "pb", "link_state").stdout.strip() == "down", 2.0
        )
        cpu, faults, sleeps = (sum(b[k] - a[k] for a, b in zip(before, after)) for k in range(3))
        return {
            "idle_ports": idle,
            "idle_on": place,
            "port_type": port_type,
            "tunables": bool(tunables),
            "preload": os.path.basename(preload) if preload else "",
            "forwarded": got,
            "us_per_frame": cpu / got * 1e6,
            "wakeups_per_frame": sleeps / got,
            "faults_per_frame": faults / got,
            "through_queue": through_queue / got,
            "idle_share": idle_share,
            "sees_down": sees_down,
        }
    finally:
        for s in switches:
            s.close()
        for name in made:  # each pair goes with either end
            sh("ip", "link", "del", name, check=False)
        if netns:  # its ends of the idle pairs go with it
            sh("ip", "netns", "del", netns, check=False)


def inside(args):
    rows = []
    for idle in args.idle:
        for place in args.idle_on if idle else ("bridge",):
            for tunables in (None, TRIM_OFF) if args.malloc_tunables else (None,):
                for preload in [None] + args.preload:
                    for kind in args.port_type:
                        setting = (tunables, preload, place, kind, args.xdp_mode, args.pmd_maxsleep)
                        rows.append(measure(idle, args.pps, args.seconds, args.frame, *setting))
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress
    print(json.dumps(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", default="0,8,16,32", help="idle ports, one setting each")
    ap.add_argument(
        "--idle-on",
        default="bridge",
        help=f"where the idle ports are, one setting each: any of {', '.join(PLACES)}, separated by commas",
    )
    ap.add_argument("--pps", type=int, default=3000, help="frames per second through the bridge")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--frame", type=int, default=4154, help="frame size in bytes")
    ap.add_argument(
        "--port-type",
        default="system",
        help="how the daemon reads and writes its ports, one setting each: system, afxdp-nonpmd, "
        "afxdp, separated by commas",
    )
    ap.add_argument("--xdp-mode", default="best-effort", help="an afxdp port's options:xdp-mode")
    ap.add_argument(
        "--pmd-maxsleep",
        type=int,
        default=500,
        help="dpdk-pcap: the longest a polling thread sleeps when few frames come, in us (0: never)",
    )
    ap.add_argument("--malloc-tunables", action="store_true", help="also run with glibc's heap trim held off")
    ap.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="LIBRARY",
        help="also run the daemon with this library preloaded (another allocator); may repeat",
    )
    args = ap.parse_args()
    try:
        args.idle = [int(x) for x in args.idle.split(",")]
    except ValueError:
        sys.exit(f"bench/ovs_ports.py: --idle: expected numbers separated by commas, got {args.idle!r}")
    args.idle_on = args.idle_on.split(",")
    args.port_type = args.port_type.split(",")
    for kind in args.port_type:
        if kind not in PORT_TYPES:
            sys.exit(
                f"bench/ovs_ports.py: --port-type: expected any of {', '.join(PORT_TYPES)}; got {kind!r}"
            )
    if "dpdk-pcap" in args.port_type:
        if not os.access(DPDK_VSWITCHD, os.X_OK):
            sys.exit(
                f"bench/ovs_ports.py: --port-type dpdk-pcap: {DPDK_VSWITCHD} not found "
                "(Debian's package openvswitch-switch-dpdk has it)"
            )
        # the two forwarding ports share a daemon with the idle ones unless those are all in another
        most = max(args.idle) + (2 if set(args.idle_on) != {"other-daemon"} else 0)
        if most > DPDK_PORTS_MAX:
            sys.exit(
                f"bench/ovs_ports.py: --idle: a DPDK daemon takes at most {DPDK_PORTS_MAX} ports, "
                f"so at most {DPDK_PORTS_MAX - 2} idle ones beside the two that forward; got {max(args.idle)}"
            )
    for place in args.idle_on:
        if place not in PLACES:
            sys.exit(f"bench/ovs_ports.py: --idle-on: expected any of {', '.join(PLACES)}, got {place!r}")
    for lib in args.preload:  # a missing library is only a warning to the loader: the run would mislead
        if not os.path.isfile(lib):
            sys.exit(f"bench/ovs_ports.py: --preload: {lib} is not a file")
    if os.environ.get(INSIDE_ENV):
        return inside(args)
    if os.geteuid() != 0:
        sys.exit("bench/ovs_ports.py: needs root (it starts Open vSwitch and makes interfaces)")
    for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "unshare"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/ovs_ports.py: {tool} is not installed")
    sys.path.insert(0, HERE)
    from generator import reference_us_per_frame

    ref = reference_us_per_frame()
    print(f"reference: the raw sender spends {ref:.2f} us of one core per frame (bench/generator.py)")
    # sysfs of the new namespace; a /run of its own, where `ip netns` keeps
    # the second daemon's namespace (so nothing of it shows outside); IPv6
    # off so that nothing but our frames crosses the bridge
    enter = (
        "mount -t sysfs sysfs /sys && mount -t tmpfs -o mode=0755 tmpfs /run && ip link set lo up && "
        'sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 && exec "$@"'
    )
    argv = ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", enter, "sh"]
    argv += [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    proc = subprocess.run(argv, env=dict(os.environ, **{INSIDE_ENV: "1"}), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench/ovs_ports.py: the measurement failed (exit {proc.returncode})")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n{args.pps} frames/s of {args.frame} bytes through one rule, {args.seconds:g} s per setting")
    print(
        f"{'idle ports':>10} {'on':>12} {'glibc trim off':>14} {'us/frame':>9} {'x ref':>6} "
        f"{'wake-ups/frame':>15} {'faults/frame':>13} {'ports':>12} {'via queue':>9} {'idle':>5} "
        f"{'sees down':>9} preload"
    )
    for r in rows:
        print(
            f"{r['idle_ports']:>10} {r['idle_on']:>12} {'yes' if r['tunables'] else 'no':>14} "
            f"{r['us_per_frame']:>9.1f} "
            f"{r['us_per_frame'] / ref:>6.1f} {r['wakeups_per_frame']:>15.2f} "
            f"{r['faults_per_frame']:>13.2f} {r['port_type']:>12} {r['through_queue']:>9.0%} "
            f"{r['idle_share']:>5.0%} {'yes' if r['sees_down'] else 'NO':>9} {r['preload']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
