"""Shell/`tc`/`ip` command plans for hosts and switch ports (pure).

Kept as data so tests can read them and the realizer can run each host's
plan as one batch inside that host's namespace.
"""

import ipaddress

from testbed.fabric.model import HOST
from testbed.fabric.queues import shaper_burst_bytes
from traffic.iperf import TCP_CONGESTION

# Queue behind each shaped port: 100 ms at the port's rate (500 KB at
# 40 Mbit/s), and at least a few frames on slow links. The default (1000
# frames of 9 KB at 40 Mbit/s = 1.8 s) would turn every stall into seconds;
# a queue of only a few frames at 40 Mbit/s starves some of 8 TCP flows
# sharing a port (their windows shrink to a frame or two and they live on
# retransmit timeouts). No queue holds much more than 100 ms, which keeps
# the traffic agents' 250 ms retransmission timeout above two full queues.
QUEUE_SECONDS = 0.1
QUEUE_MIN_FRAMES = 4
TCP_RETRIES = 200  # a host's tcp_retries2: see host_script
# What a host's sockets start with, in order of preference (host_tcp_default).
TCP_UNPACED = (TCP_CONGESTION, "reno")
ARP_EVICT_NOCARRIER = "net/ipv4/conf/all/arp_evict_nocarrier"  # see host_script


def queue_bytes(rate_mbit, mtu, queue_s=QUEUE_SECONDS):
    return int(max(QUEUE_MIN_FRAMES * (mtu + 14), rate_mbit * 1e6 / 8 * queue_s))


def queue_seconds(fabric):
    """How long a queue lasts at the rate this machine shapes: 100 ms of
    emulated time. Under time dilation N the rate is N times lower and the
    queue lasts N times longer, so it holds the same bytes, and drops the
    same packets, as the undilated fabric's."""
    return QUEUE_SECONDS * fabric.time_dilation


def shaping_lines(ifname, rate_mbit, mtu, delay_s=0.0, queue_s=QUEUE_SECONDS):
    """`tc -batch` lines: an HTB class at the scaled rate with a short FIFO
    (or netem for a delayed link) under it, of `queue_s` at that rate."""
    lines = [
        f"qdisc replace dev {ifname} root handle 1: htb default 1",
        port_rate_line(ifname, rate_mbit, mtu),
    ]
    limit = queue_bytes(rate_mbit, mtu, queue_s)
    if delay_s > 0:
        frames = max(QUEUE_MIN_FRAMES, limit // (mtu + 14))
        lines.append(
            f"qdisc replace dev {ifname} parent 1:1 handle 10: netem "
            f"delay {delay_s * 1e3:.6g}ms limit {frames}"
        )
    else:
        lines.append(f"qdisc replace dev {ifname} parent 1:1 handle 10: bfifo limit {limit}")
    return lines


def port_rate_line(ifname, rate_mbit, mtu):
    """The `tc -batch` line of a port's root HTB class, which every class of
    the port borrows from: the port's rate. Given again with another rate,
    it changes the port's rate and nothing else (link-degrade)."""
    burst = shaper_burst_bytes(mtu)
    return (
        f"class replace dev {ifname} parent 1: classid 1:1 htb rate {rate_mbit:.6g}mbit "
        f"ceil {rate_mbit:.6g}mbit burst {burst} cburst {burst} quantum {mtu + 14}"
    )


def port_lines(fabric, link, ifname, engine=None):
    """`tc -batch` lines of one port: a single FIFO, or with a queue engine
    (testbed/emulation/queues.py) its priority classes and BPF programs."""
    if engine is not None:
        return engine.port_lines(ifname, fabric.scaled_mbit(link), fabric.mtu, fabric.shaped_delay_s(link))
    return shaping_lines(
        ifname, fabric.scaled_mbit(link), fabric.mtu, fabric.shaped_delay_s(link), queue_seconds(fabric)
    )


def switch_port_plan(fabric, engine=None):
    """(`ip -batch` lines, `tc -batch` lines) for every switch-side port."""
    ip_lines, tc_lines = [], []
    for link in fabric.links:
        for end in (link.a, link.b):
            if fabric.nodes[end.node].kind != HOST:
                ip_lines.append(f"link set dev {end.ifname} mtu {fabric.mtu}")
                tc_lines += port_lines(fabric, link, end.ifname, engine)
    return ip_lines, tc_lines


def rail_prefixes(fabric, rail):
    """Every destination prefix a rail-`rail` NIC talks to (one per DC)."""
    dcs = sorted({n.dc for n in fabric.hosts()})
    return [str(ipaddress.IPv4Network(f"10.{dc * 16 + rail}.0.0/16")) for dc in dcs]


def cpu_mask(ncpus):
    """The sysfs CPU-mask text that names CPUs 0..ncpus-1 (32-bit words,
    most significant first, comma-separated)."""
    if ncpus < 1:
        raise ValueError("a CPU mask needs at least one CPU")
    bits = (1 << ncpus) - 1
    words = []
    while bits:
        words.append(f"{bits & 0xFFFFFFFF:08x}")
        bits >>= 32
    return ",".join(reversed(words))


def steering_script(ifnames, mask, sysfs="/sys"):
    """Shell that steers every receive queue of `ifnames` by flow hash
    (RPS) over the CPUs of `mask`.

    Why: a frame crosses each veth by being queued
    on the backlog of whichever CPU sent it, and the CPU that dequeues a
    shaped port changes from frame to frame (the enqueuer, or the qdisc
    watchdog's softirq). Two frames of one connection then wait on two
    CPUs' backlogs and may leave in either order, which a RoCE receiver
    takes for loss. With RPS every frame of a connection is queued on the
    one CPU its hash picks, so each connection keeps its order at every hop."""
    return "\n".join(
        f"for q in {sysfs}/class/net/{i}/queues/rx-*/rps_cpus; do echo {mask} > $q; done" for i in ifnames
    )


def host_tcp_default(allowed: list[str]) -> str | None:
    """The congestion control a host's namespace starts its TCP sockets
    with, given the machine's `tcp_allowed_congestion_control` (what a
    namespace may make its default): the one the flows run
    (TCP_CONGESTION), else Reno; None when neither is allowed (an admin's
    list can leave out even Reno), and the hosts keep the machine's default.

    Why not the machine's default: iperf3 chooses its flows' algorithm only
    once connected, so each socket first runs the namespace's. Where that is
    BBR, BBR turns on the kernel's own pacing of the socket, and pacing stays
    on after the switch to CUBIC. A paced socket's rate can collapse for a
    moment when its port dies, and the segments it sends then hold back its
    next ones for as long as that rate says (docs/limits.md, tor-failure).
    Neither CUBIC nor Reno paces a socket."""
    return next((cc for cc in TCP_UNPACED if cc in allowed), None)


def host_script(fabric, host, engine=None, rps_mask=None, *, tcp_default=None, keep_neighbours=False):
    """One shell script that configures a host: addresses, MTU, offloads
    (TCP through the userspace datapath needs them off), shaping of its
    egress, and the multipath route that spreads flows over the NIC's ports
    (hashing on L4, skipping a port whose link is down). With a queue
    engine, TCP negotiates ECN. With `rps_mask`, its ports' receive queues
    are steered by flow hash (see steering_script): from a private mount
    namespace, since only a sysfs mounted from inside the host's network
    namespace shows its interfaces. Its TCP sockets start with
    `tcp_default` (host_tcp_default) when given. With `keep_neighbours`
    (kernels since 5.16 have the setting), a port that loses its carrier
    keeps its neighbour entries."""
    sysctls = ["net.ipv4.tcp_ecn=1"] if engine is not None else []
    if tcp_default is not None:
        sysctls.append(f"net.ipv4.tcp_congestion_control={tcp_default}")
    sysctls += [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv4.conf.all.ignore_routes_with_linkdown=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        # A host's shaped port drops what its FIFO cannot hold, and the
        # kernel treats that as local congestion: a TCP socket with nothing
        # in flight retries every 500 ms, counts each try against
        # tcp_retries2, and after 15 (7.5 s) fails with "Connection timed
        # out", although its path is healthy. Seen when 8 streams share a
        # port: one starved stream killed its iperf3 client's 8. 200 tries
        # (100 s) outlasts any starvation a drill shows; a timeout after
        # retransmissions (no answer from the far end) takes longer still.
        f"net.ipv4.tcp_retries2={TCP_RETRIES}",
    ]
    if keep_neighbours:
        # The far ends' MACs do not change when a cable goes. Evicted at
        # the loss of carrier, an entry can be made anew by a segment the
        # kernel sends through the dead port just before its routes move;
        # the segment then waits in it until ARP gives up (3 s), and TCP
        # may not retransmit it meanwhile (docs/limits.md, tor-failure).
        # A kept entry hands such a segment to the dead port, which drops
        # it, so TCP can send it again by the live one.
        sysctls.append(ARP_EVICT_NOCARRIER.replace("/", ".") + "=0")
    lines = ["sysctl -qw " + " ".join(sysctls)]
    ip_lines, tc_lines = [], []
    links = {l.end(host).ifname: l for l in fabric.links_of(host)}
    for nic in fabric.nics_of(host):
        for ifname in nic.ports:
            link = links[ifname]
            ip_lines += [
                f"link set dev {ifname} address {nic.mac} mtu {fabric.mtu}",
                f"addr add {nic.ip}/32 dev {ifname}",
                f"link set dev {ifname} up",
            ]
            tc_lines += port_lines(fabric, link, ifname, engine)
            lines.append(f"ethtool -K {ifname} tx off rx off tso off gso off gro off >/dev/null 2>&1 || true")
            lines.append(f"sysctl -qw net.ipv4.conf.{ifname.replace('.', '/')}.rp_filter=0")
        hops = " ".join(f"nexthop dev {p}" for p in nic.ports)
        for prefix in rail_prefixes(fabric, nic.rail):
            ip_lines.append(f"route replace {prefix} {hops}")
    if rps_mask is not None:
        ports = [p for nic in fabric.nics_of(host) for p in nic.ports]
        # On a mount point of its own: a kernel may refuse sysfs over /sys.
        lines.append(
            "unshare -m sh -e <<'HPNLAB_RPS'\n"
            "d=$(mktemp -d)\n"
            'trap \'umount "$d" 2>/dev/null; rmdir "$d"\' EXIT\n'
            'mount -t sysfs hpnlab-sysfs "$d"\n'
            + steering_script(ports, rps_mask, sysfs="$d")
            + "\nHPNLAB_RPS"
        )
    # set -e: a failed address, route or qdisc must fail the bring-up, not
    # hide behind the last command's status.
    return "\n".join(["set -e", _batch("ip", ip_lines)] + lines + [_batch("tc", tc_lines)]) + "\n"


def _batch(tool, lines):
    body = "\n".join(lines)
    return f"{tool} -batch - <<'HPNLAB_EOF'\n{body}\nHPNLAB_EOF"


def narrowed_overrides(old, new):
    """Of `new`, only what narrows `old` (a destination gets an override, or
    loses ports from one), the rest as in `old`: what a host can take before
    the switches confirm the routes, since it only stops using ports."""
    out = dict(old)
    for ip, ports in new.items():
        ports = tuple(ports)
        if ip not in old or set(ports) < set(old[ip]):
            out[ip] = ports
    return out


def override_changes(old, new):
    """The route changes turning one host's /32 overrides `old` into `new`
    ({dst ip: (ifname, ...)}), as (dst ip, ports) to replace and (dst ip,
    None) to delete: the analogue of the host learning that a destination
    lost its port in one plane."""
    changes = [(ip, None) for ip in sorted(set(old) - set(new))]
    for ip, ports in sorted(new.items()):
        if old.get(ip) != tuple(ports):
            changes.append((ip, tuple(ports)))
    return changes
