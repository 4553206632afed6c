"""The fabric as Mininet and Open vSwitch hold it: its bridges, hosts and
cables (`new_net`, `populate`), and the bridges pointed at the controller
(`connect_argv`). FabricNet (realize.py) runs them and records what they
create."""

import json

RECONNECT_MAX_MS = 1000  # a switch retries its lost controller at least every second


def new_net():
    """An empty Mininet network. The caller keeps it before `populate` adds
    anything, so that a failure half-way through still lets Mininet stop
    what it started."""
    from mininet.link import Link
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("error")
    # No controller for Mininet to configure: the switches get theirs once
    # built (connect_argv), on a Unix socket.
    return Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False, link=Link)


def populate(net, fabric, datapath, on_host) -> None:
    """The Mininet model of `fabric` in `net`, not yet built: one OVS bridge
    per switch on `datapath`, one host per host (no addresses: the host
    scripts give them), one link per cable with the NICs' MAC addresses.
    `on_host(name, pid)` hears of each host's shell as soon as it runs, so
    that a failure later in the build still leaves it recorded."""
    from mininet.node import Host, OVSSwitch

    for sw in fabric.switches():
        net.addSwitch(
            sw.name,
            cls=OVSSwitch,
            datapath=datapath,
            dpid=f"{sw.dpid:016x}",
            protocols="OpenFlow13",
            failMode="secure",
        )
    for h in fabric.hosts():
        on_host(h.name, net.addHost(h.name, cls=Host, ip=None).pid)
    macs = {p: nic.mac for nic in fabric.nics for p in nic.ports}
    for link in fabric.links:
        addrs = {k: macs[e.ifname] for k, e in (("addr1", link.a), ("addr2", link.b)) if e.ifname in macs}
        net.addLink(
            link.a.node,
            link.b.node,
            port1=link.a.port,
            port2=link.b.port,
            intfName1=link.a.ifname,
            intfName2=link.b.ifname,
            **addrs,
        )


def connect_argv(switches, target: str) -> list[str]:
    """One ovs-vsctl transaction that gives every switch the controller at
    `target`. A switch retries a lost controller with a backoff that grows
    to 8 s by default; capped at 1 s, a restarted controller is found
    within a second. While none is connected the switches keep their flows
    (fail-mode secure), so traffic goes on. No inactivity probe: over a
    local socket a controller that dies closes it, which the switch sees at
    once, while a probe (5 s by default) would drop a controller that is
    only busy computing routes (seconds under software emulation), which
    then reads every switch's tables again."""
    argv = ["ovs-vsctl", "--timeout=30"]
    for i, sw in enumerate(switches):
        argv += [
            "--",
            f"--id=@c{i}",
            "create",
            "Controller",
            "target=" + json.dumps(target, ensure_ascii=False),
            f"max_backoff={RECONNECT_MAX_MS}",
            "inactivity_probe=0",
            "--",
            "set",
            "Bridge",
            sw.name,
            f"controller=[@c{i}]",
        ]
    return argv
