"""What this machine's kernel and tools can do, and what that means for hpnlab.

Probes act for real (a qdisc is added to a veth inside a throw-away network
namespace) instead of trusting module lists, because a feature can be built
in, loadable, or missing. The namespace is an unnamed one of the probe's own
process (unshare): it vanishes with that process, so no probe can leave
anything behind, even when hpnlab is interrupted or killed meanwhile.
"""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from . import ovs_pacing


@dataclass(frozen=True)
class Feature:
    name: str
    present: bool
    detail: str
    enables: str


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def _modprobe(module):
    if shutil.which("modprobe"):
        _run(["modprobe", "-q", module])
    return os.path.isdir(f"/sys/module/{module}")


_VETH = "ip link add pa type veth peer name pb && ip link set pa up"


def _in_fresh_netns(command):
    """Run shell `command` (built from this module's constants only) after
    creating a veth pair pa/pb, in a network namespace that exists only as
    long as the process does."""
    return _run(["unshare", "--net", "sh", "-c", f"{_VETH} && {command}"])


BPF_QUEUES = "bpf queue engine"


def _bpf_queue_probe():
    """Build the queue engine (testbed/emulation/bpf/queue.c) and load it on
    a veth, in a throw-away network and mount namespace with its own bpffs,
    so that the maps it pins vanish with it."""
    from .queues import QueueSetupError, attach_lines, build_object

    try:
        obj = build_object()
    except QueueSetupError as e:
        return False, str(e)
    # the very lines a fabric runs: a switch port on pa, a host port on pb
    lines = attach_lines("pa", obj) + attach_lines("pb", obj, host=True)
    load = "printf '%s\\n' " + " ".join(shlex.quote(l) for l in lines) + " | tc -batch -"
    r = _run(
        ["unshare", "--net", "--mount", "sh", "-c", f"mount -t bpf bpf /sys/fs/bpf && {_VETH} && {load}"]
    )
    if r.returncode != 0:
        return False, (r.stderr.strip().splitlines() or ["failed"])[-1]
    return True, f"loaded ({os.path.basename(obj)})"


def _qdisc_probe(module, args):
    _modprobe(module)
    r = _in_fresh_netns(shlex.join(["tc", "qdisc", "replace", "dev", "pa", "root"] + args))
    return r.returncode == 0, (r.stderr.strip().splitlines() or ["ok"])[-1]


QDISCS = {
    # name: (kernel module, tc arguments, what it enables)
    "htb": ("sch_htb", ["htb", "default", "1"], "link rate shaping (required)"),
    "red": (
        "sch_red",
        [
            "red",
            "limit",
            "400000",
            "min",
            "30000",
            "max",
            "90000",
            "avpkt",
            "1500",
            "burst",
            "40",
            "probability",
            "0.1",
            "bandwidth",
            "10Mbit",
            "ecn",
        ],
        "ECN marking by queue length (RED)",
    ),
    "netem": ("sch_netem", ["netem", "delay", "1ms"], "link delay, loss and jitter (e.g. DCI delay)"),
    "prio": ("sch_prio", ["prio"], "strict-priority queues"),
    "ets": ("sch_ets", ["ets", "bands", "2", "strict", "2"], "ETS priority queues"),
    "tbf": ("sch_tbf", ["tbf", "rate", "10mbit", "burst", "10kb", "latency", "50ms"], "token-bucket shaping"),
}


def probe():
    """Return a list of Features. Needs root for the kernel probes."""
    ovs_mod = _modprobe("openvswitch")
    feats = [
        Feature(
            "openvswitch module",
            ovs_mod,
            "loaded" if ovs_mod else "not loadable",
            "OVS kernel datapath (fast); without it the userspace datapath is used",
        )
    ]
    if os.geteuid() == 0 and all(shutil.which(t) for t in ("ip", "tc", "unshare")):
        feats += _kernel_queue_features()
    else:
        feats.append(Feature("kernel qdiscs", False, "not probed: needs root", "everything"))
    feats.append(_dctcp_feature())
    for tool, enables in (
        ("iperf3", "bulk TCP traffic (drills)"),
        ("ovs-vsctl", "Open vSwitch"),
        ("ethtool", "offload settings TCP needs on the userspace datapath"),
        ("tcpdump", "packet captures"),
        ("mnexec", "Mininet hosts"),
    ):
        path = shutil.which(tool)
        feats.append(Feature(tool, bool(path), path or "not found", enables))
    feats += _ovs_features(ovs_mod)
    for mod in ("mininet", "os_ken", "scapy"):
        ok = importlib.util.find_spec(mod) is not None
        feats.append(Feature(f"python: {mod}", ok, "importable" if ok else "missing", "hpnlab itself"))
    return feats


def _kernel_queue_features():
    """The qdiscs, the BPF queue engine and bonding, each tried in a fresh
    network namespace (root only)."""
    feats = []
    for name, (module, args, enables) in QDISCS.items():
        ok, detail = _qdisc_probe(module, args)
        feats.append(Feature(name, ok, detail, enables))
    ok, detail = _bpf_queue_probe()
    feats.append(
        Feature(BPF_QUEUES, ok, detail, "priority classes, ECN marking and queue counters (scenario queues)")
    )
    _modprobe("bonding")
    r = _in_fresh_netns("ip link add bond0 type bond")
    feats.append(
        Feature(
            "bonding",
            r.returncode == 0,
            (r.stderr.strip() or "ok"),
            "Linux bonding (not needed: NIC ports use multipath routes)",
        )
    )
    return feats


def _dctcp_feature():
    _modprobe("tcp_dctcp")
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as fh:
            ccs = fh.read().split()
    except OSError:
        ccs = []
    enables = "DCTCP congestion control (ECN-reactive TCP)"
    return Feature("dctcp", "dctcp" in ccs, " ".join(ccs) or "unknown", enables)


# The userspace datapath sends every packet of every bridge through one
# AF_PACKET socket of ovs-vswitchd. A packet waiting in a shaped egress queue
# still counts against that socket's send buffer, so the buffer caps the bytes
# queued in the whole fabric: at Debian's default (net.core.wmem_default,
# 208 KiB) OVS drops what the modeled queues would have held. make setup
# raises the default before it starts Open vSwitch.
OVS_TX_BUFFER = 8 << 20
OVS_TX_FEATURE = "ovs transmit buffer"
# It also reads each switch port through an AF_PACKET socket of its own,
# made when the port is added, with the default receive buffer
# (net.core.rmem_default, 208 KiB: about 90 frames). When ovs-vswitchd is
# off the CPU for longer than that takes to arrive (tens of ms at the
# scaled rates, seen on a 2-core machine), the socket drops frames no
# modeled queue dropped. make setup raises the default; it takes effect for
# ports added afterwards, so no restart is needed. 4 MiB holds most of a
# second of a port's traffic.
OVS_RX_BUFFER = 4 << 20
OVS_RX_FEATURE = "ovs receive buffer"
SMALL_OVS_BUFFERS = (OVS_TX_FEATURE, OVS_RX_FEATURE)


# The system's Open vSwitch keeps its sockets and PID files here; a named
# fabric's own names its folder in OVS_RUNDIR (named.py), where Open
# vSwitch's tools look too.
SYSTEM_OVS_RUNDIR = "/var/run/openvswitch"


def ovs_rundir():
    """The run folder of the Open vSwitch this process's fabric uses."""
    return os.environ.get("OVS_RUNDIR") or SYSTEM_OVS_RUNDIR


def ovs_pidfile():
    """ovs-vswitchd's PID file: the system daemon's, or, in a named fabric,
    that fabric's own daemon's. The system daemon of a named fabric's run
    is idle: its CPU is none of the run's cost, and its sockets are in
    another network namespace."""
    return os.path.join(ovs_rundir(), "ovs-vswitchd.pid")


# The userspace datapath reads a port by allocating 32 packet buffers of
# the port's MTU (9 KiB and more here), receiving what is there, and freeing
# the buffers it did not fill: each time it polls each port. glibc's malloc
# serves blocks that large from its sorted bins and merges them back on
# free: 29% of the daemon's CPU samples in a drill (perf); tcmalloc keeps them
# in per-thread free lists. Preloaded into ovs-vswitchd it cut Open
# vSwitch's CPU per packet-hop by about an eighth in drills, and by up to
# 45% with many ports (docs/numbers.md). make setup installs it and starts
# Open vSwitch with it on the userspace datapath; a named fabric's own
# daemon gets it too.
OVS_MALLOC_FEATURE = "ovs allocator"
OVS_MALLOC_NAME = "libtcmalloc_minimal.so.4"
OVS_MALLOC_PLACES = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def ovs_malloc_library():
    """The allocator library to preload into ovs-vswitchd, or None when
    it is not installed."""
    for folder in OVS_MALLOC_PLACES:
        path = os.path.join(folder, OVS_MALLOC_NAME)
        if os.path.isfile(path):
            return path
    return None


def maps_name_library(maps_text, name):
    """True when a process's memory map (/proc/PID/maps) holds the library
    `name` (its file, where the name is a link: name.MINOR.PATCH)."""
    files = {line.rsplit("/", 1)[-1] for line in maps_text.splitlines() if "/" in line}
    return any(f == name or f.startswith(name + ".") for f in files)


def ovs_malloc_in_use():
    """True when the running ovs-vswitchd has the allocator loaded; None
    when that cannot be read (no daemon, no PID file)."""
    try:
        with open(f"/proc/{_ovs_pid()}/maps") as fh:
            return maps_name_library(fh.read(), OVS_MALLOC_NAME)
    except (OSError, ValueError):
        return None


# Open vSwitch's main thread pays for a whole pass over every port for
# nearly every frame it forwards at a fabric's rates; the pacer
# (ovs_pacing.py) spaces its passes out by four frame times, so each
# finds more frames. make setup builds it and starts Open vSwitch with it
# preloaded on the userspace datapath; a named fabric's own daemon gets it
# too; a fabric writes the gap while it runs.
OVS_PACER_FEATURE = "ovs pass pacing"


def ovs_pacer_library():
    """The pacer to preload into ovs-vswitchd (built if need be), or None
    when no C compiler is there to build it."""
    return ovs_pacing.build_library()


def ovs_pass_gap_file():
    """The file the pacer of this process's Open vSwitch reads its gap from."""
    return ovs_pacing.gap_file(ovs_rundir())


def ovs_pacer_in_use():
    """True when the running ovs-vswitchd has this version of the pacer
    loaded and knows where its gap file is; None when that cannot be read."""
    try:
        pid = _ovs_pid()
        with open(f"/proc/{pid}/maps") as fh:
            mapped = ovs_pacing.maps_hold_pacer(fh.read(), ovs_pacing.current_library())
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return mapped and ovs_pacing.environ_names_gap_file(fh.read())
    except (OSError, ValueError):
        return None


def _ovs_pid():
    """The running ovs-vswitchd's PID, from its PID file (OSError, ValueError)."""
    with open(ovs_pidfile()) as fh:
        return int(fh.read().strip())


# Open vSwitch keeps its own copy of the kernel's routing table, for
# tunnels, which no fabric here uses. It throws the copy away at every
# interface change and builds it again on its main thread, the one that on
# the userspace datapath also forwards every frame and reports port changes
# to the controller: it dumps the routes and, for the interfaces they leave
# by (every switch port has an IPv6 link-local route), reads every
# interface's addresses (getifaddrs). perf found that work in the first
# 24 ms after a cable pull. --disable-system-route leaves the copy empty:
# failover-probe's worst gaps were somewhat shorter with it, and its first
# port report came no sooner (docs/numbers.md). make setup starts Open
# vSwitch with it and restarts an idle one without it; a named fabric's own
# daemon gets it too.
OVS_ROUTE_FEATURE = "ovs without system routes"
OVS_VSWITCHD_OPTIONS = ("--disable-system-route",)


def cmdline_has_options(raw: bytes, options=OVS_VSWITCHD_OPTIONS) -> bool:
    """True when a process's command line (/proc/PID/cmdline: arguments
    ended by NUL bytes) holds every one of `options` as an argument."""
    argv = raw.decode(errors="replace").split("\0")
    return all(option in argv for option in options)


def ovs_options_in_use():
    """True when the running ovs-vswitchd was started with every one of
    OVS_VSWITCHD_OPTIONS; None when that cannot be read."""
    try:
        with open(f"/proc/{_ovs_pid()}/cmdline", "rb") as fh:
            return cmdline_has_options(fh.read())
    except (OSError, ValueError):
        return None


def _ovs_route_feature():
    enables = (
        "less work for Open vSwitch at each cable pull: no copy of the routing table to "
        "rebuild (make setup restarts an idle Open vSwitch with the option)"
    )
    in_use = ovs_options_in_use()
    if in_use is None:
        return Feature(OVS_ROUTE_FEATURE, False, "ovs-vswitchd's command line could not be read", enables)
    detail = " ".join(OVS_VSWITCHD_OPTIONS) + (" in use" if in_use else " not given")
    return Feature(OVS_ROUTE_FEATURE, in_use, detail, enables)


def _preloaded_feature(name, userspace, in_use, runs_with, runs_without, enables):
    """Whether ovs-vswitchd runs with a library make setup preloads into it
    on the userspace datapath (`in_use`: ovs_malloc_in_use and the like)."""
    if not userspace:
        return Feature(name, True, "kernel datapath: not used", enables)
    found = in_use()
    if found is None:
        return Feature(name, False, "ovs-vswitchd's memory map or environment could not be read", enables)
    return Feature(name, found, f"ovs-vswitchd runs {runs_with if found else runs_without}", enables)


def _ovs_malloc_feature(userspace):
    enables = (
        "less CPU per packet-hop on the userspace datapath (make setup installs "
        f"{OVS_MALLOC_NAME} and restarts an idle Open vSwitch with it)"
    )
    return _preloaded_feature(
        OVS_MALLOC_FEATURE,
        userspace,
        ovs_malloc_in_use,
        f"with {OVS_MALLOC_NAME}",
        "on glibc's malloc",
        enables,
    )


def _ovs_pacer_feature(userspace):
    enables = (
        "less CPU per packet-hop on the userspace datapath: passes spaced by four frame times "
        "(make setup builds the pacer and restarts an idle Open vSwitch with it)"
    )
    return _preloaded_feature(
        OVS_PACER_FEATURE, userspace, ovs_pacer_in_use, "with the pacer", "without the pacer", enables
    )


def ovs_socket_values(ss_text, key):
    """One skmem field (`tb` send buffer, `d` drops, ...) of each of
    ovs-vswitchd's packet sockets, from the output of `ss -0 -m -p -a`
    (skmem on the socket's line, or on the next one when ss writes to a
    terminal)."""
    values, pending = [], False
    for line in ss_text.splitlines():
        owner = '"ovs-vswitchd"' in line
        m = re.search(rf"[(,]{key}(\d+)", line)
        if m and (owner or pending):
            values.append(int(m.group(1)))
        pending = owner and not m
    return values


def ovs_send_buffers(ss_text):
    """Send-buffer sizes (tb) of ovs-vswitchd's packet sockets."""
    return ovs_socket_values(ss_text, "tb")


def ovs_packet_sockets():
    """`ss -0 -m -p -a`: the packet sockets, with their memory and owners
    ("" where ss cannot run: then nothing is known of them)."""
    try:
        return _run(["ss", "-0", "-m", "-p", "-a"]).stdout or ""
    except OSError:
        return ""


def ovs_send_buffer():
    """The smallest send buffer of ovs-vswitchd's packet sockets (None when
    it has none yet). make setup asks this too, to restart an idle OVS."""
    sizes = ovs_send_buffers(ovs_packet_sockets())
    return min(sizes) if sizes else None


def _ovs_tx_feature(userspace):
    enables = (
        "switch queues as deep as modeled on the userspace datapath "
        "(make setup raises net.core.wmem_default and restarts an idle OVS)"
    )
    if not userspace:
        return Feature(OVS_TX_FEATURE, True, "kernel datapath: not used", enables)
    size, where = ovs_send_buffer(), "ovs-vswitchd send buffer"
    if size is None:
        try:
            with open("/proc/sys/net/core/wmem_default") as fh:
                size, where = int(fh.read()), "net.core.wmem_default (OVS has not sent yet)"
        except (OSError, ValueError):
            return Feature(OVS_TX_FEATURE, False, "unknown", enables)
    return Feature(
        OVS_TX_FEATURE, size >= OVS_TX_BUFFER, f"{where} {size} bytes (want >= {OVS_TX_BUFFER})", enables
    )


def _ovs_rx_feature(userspace):
    enables = (
        "no frame lost while Open vSwitch waits for a CPU on the userspace datapath "
        "(make setup raises net.core.rmem_default)"
    )
    if not userspace:
        return Feature(OVS_RX_FEATURE, True, "kernel datapath: not used", enables)
    try:
        with open("/proc/sys/net/core/rmem_default") as fh:
            size = int(fh.read())
    except (OSError, ValueError):
        return Feature(OVS_RX_FEATURE, False, "unknown", enables)
    return Feature(
        OVS_RX_FEATURE,
        size >= OVS_RX_BUFFER,
        f"net.core.rmem_default {size} bytes, what a switch port gets (want >= {OVS_RX_BUFFER})",
        enables,
    )


def has(feats, name):
    return any(f.name == name and f.present for f in feats)


def lacking(feats, *names):
    """The names among `names` this machine lacks, in order."""
    return [n for n in names if not has(feats, n)]


def _ovs_features(ovs_mod):
    """Whether Open vSwitch serves, and (when it does) its sockets' buffers."""
    if os.environ.get("HPNLAB_FABRIC"):  # a named fabric starts an Open vSwitch of its own
        daemons = all(shutil.which(t) for t in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd"))
        detail = "its own, started with the fabric" if daemons else "ovsdb-server or ovs-vswitchd not found"
        return [Feature("ovsdb running", daemons, detail, "building fabrics (install: make setup)")]
    ovs_up = bool(shutil.which("ovs-vsctl")) and _run(["ovs-vsctl", "--timeout=3", "show"]).returncode == 0
    feats = [
        Feature(
            "ovsdb running",
            ovs_up,
            "ovs-vsctl show " + ("ok" if ovs_up else "failed"),
            "building fabrics (start it: make setup)",
        )
    ]
    if ovs_up:
        feats.append(_ovs_tx_feature(userspace=not ovs_mod))
        feats.append(_ovs_rx_feature(userspace=not ovs_mod))
        feats.append(_ovs_malloc_feature(userspace=not ovs_mod))
        feats.append(_ovs_pacer_feature(userspace=not ovs_mod))
        feats.append(_ovs_route_feature())
    return feats


def datapath(feats):
    """'kernel' when the OVS kernel module is there, else 'user'. A named
    fabric's own Open vSwitch (named.py) always runs the userspace one."""
    if os.environ.get("HPNLAB_FABRIC"):
        return "user"
    return "kernel" if has(feats, "openvswitch module") else "user"


def required_features(fabric):
    """Kernel features a fabric needs beyond the basics: (feature, why)."""
    need = []
    if any(l.delay_s > 0 for l in fabric.links):
        need.append(("netem", "links with delay (dci.delay)"))
    if fabric.queues is not None:
        need.append((BPF_QUEUES, "priority queues (queues)"))
    return need


def missing_for(fabric, feats):
    """One message per required feature the machine lacks."""
    module = {name: mod for name, (mod, _, _) in QDISCS.items()}
    out = []
    if any(f.name == "ovsdb running" for f in feats) and not has(feats, "ovsdb running"):
        out.append(
            "Open vSwitch is not running (ovs-vsctl show failed): start it with "
            "'make setup', or /usr/share/openvswitch/scripts/ovs-ctl start"
        )
    for name, why in required_features(fabric):
        if has(feats, name):
            continue
        if name == BPF_QUEUES:
            detail = next((f.detail for f in feats if f.name == name), "not probed")
            out.append(
                f"{why} need the BPF queue engine, which does not work here: {detail} "
                "(hpnlab doctor shows it; make setup installs clang and libbpf-dev)"
            )
        else:
            out.append(
                f"{why} need the {name} qdisc (kernel module {module.get(name, name)}), "
                f"which this kernel lacks; run it where the module exists (e.g. the Vagrant VM)"
            )
    return out
