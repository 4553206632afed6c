"""The drill's timeline: iperf3 clients start and cables are pulled or
replugged at their scheduled times on the drill's clock, each fault stamped
with when it really happened; and how long the controller took to converge
after each one, from its acknowledged route versions."""

import time
from collections.abc import Sequence

from testbed.fabric.model import Endpoint, Fabric, Link


def run_timeline(fnet, flows, pairs, sc, t0, log):
    """Start clients, apply faults and stop or start the controller at their
    scheduled times. Cables pulled or replugged at the same time go together
    (a failing switch loses its links at once). Returns (faults as applied,
    controller actions as applied)."""
    events = [(p.start, "client", p) for p in pairs]
    events += [(f.at, "fault", f) for f in sc.faults]
    events += [(e["at"], "controller", e) for e in sc.controller_timeline]
    events.sort(key=lambda e: (e[0], e[1] != "client"))
    applied, controller = [], []
    for at, kind, items in _together(events):
        sleep_until(t0 + at)
        if kind == "client":
            flows.start_client(items[0], t0)
            continue
        if kind == "controller":
            item = items[0]
            (fnet.stop_controller if item["action"] == "stop" else fnet.start_controller)()
            t = time.monotonic() - t0
            log(f"[{t / fnet.fabric.time_dilation:6.2f}s] controller {item['action']}")
            controller.append({"at": at, "applied_at": round(t, 4), "action": item["action"]})
            continue
        links = [fault_link(fnet.fabric, item.link, item.index) for item in items]
        # The switches may see the port change (and the controller answer it)
        # before set_links returns: convergence counts from the moment it was issued.
        issued = time.monotonic() - t0
        rate = {}
        if kind == "rate":
            item = items[0]
            share = item.rate if item.action == "link-degrade" else 1.0
            fnet.set_link_rate(links[0], share)
            rate = {"rate": share}
        else:
            fnet.set_links(links, up=items[0].action == "link-up")
        t = time.monotonic() - t0
        for item, link in zip(items, links):
            a, b = item.link
            to = f" to {share:.0%} of its rate" if item.action == "link-degrade" else ""
            log(f"[{t / fnet.fabric.time_dilation:6.2f}s] {item.action} {a} <-> {b}{to}")  # emulated time
            applied.append(
                {
                    "at": at,
                    "issued_at": round(issued, 4),
                    "applied_at": round(t, 4),
                    "action": item.action,
                    "link": [a, b],
                    "index": item.index,
                    "link_name": link.name,
                    **({"name": item.name} if item.name else {}),
                    **rate,
                }
            )
    return applied, controller


def _together(events):
    """(at, kind, [items]) in order: consecutive cable faults of one action
    at the same time become one step ("cables"); every other event, a rate
    fault included, is a step of its own ("client", "controller", "rate")."""
    steps: list = []
    for at, kind, item in events:
        if kind == "fault":
            kind = "rate" if item.action in RATE_ACTIONS else "cables"
        last = steps[-1] if steps else None
        if kind == "cables" and last and last[:2] == (at, kind) and last[2][0].action == item.action:
            last[2].append(item)
        else:
            steps.append((at, kind, [item]))
    return steps


# Faults that change a link's rate, not whether it carries: the routes stand.
RATE_ACTIONS = ("link-degrade", "link-restore")


def convergence_s(events, t0, fault, switch_ports):
    """Seconds from a fault being issued to the first routes version that
    includes it being acknowledged by every switch and installed in every
    host that needed a change; None if no such version came.

    `switch_ports`: the (switch, port) ends of the fault's link. A version
    includes a link-down when one of them is among its down ports, a link-up
    when none is: a version computed before the switch reported the change
    does not count, however soon after the fault it came."""
    since = fault.get("issued_at", fault["applied_at"])
    ends = {tuple(p) for p in switch_ports}
    for ev in events:
        if ev["event"] != "routes" or ev["t"] - t0 < since:
            continue
        down = {tuple(p) for p in ev.get("down", ())}
        if bool(ends & down) == (fault["action"] == "link-down"):
            return round(ev.get("applied_t", ev["t"]) - t0 - since, 4)
    return None


def fault_link(fabric: Fabric, link: Sequence[str], index: int = 0) -> Link:
    """The link a fault pulls or replugs: the `index`-th between two nodes."""
    a, b = link
    return fabric.links_between(a, b)[index]


def switch_ends(fabric: Fabric, fault: dict) -> list[Endpoint]:
    """The switch-side ends of the link of a fault as applied (results.json's faults)."""
    link = fault_link(fabric, fault["link"], fault.get("index", 0))
    return [e for e in (link.a, link.b) if fabric.nodes[e.node].is_switch]


def link_switch_ports(fabric: Fabric, fault: dict) -> list[tuple[str, int]]:
    """The (switch, port) ends of the link of a fault as applied."""
    return [(e.node, e.port) for e in switch_ends(fabric, fault)]


def sleep_until(deadline):
    # Scheduling a timeline, not waiting for an event: the drill's clock.
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
