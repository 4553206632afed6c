"""The fabric a running `hpnlab up` (or drill) owns, seen from another shell:
what `hpnlab status`, `exec` and `link` act on.

Everything comes from what the owner recorded: the ledger (who owns the
fabric, its run folder, each host's namespace holder by PID and start
time), the model it built (`fabric.json` in the run folder) and the
controller's events (`controller.log` there, one `event {json}` line each).
Nothing is guessed from names. A cable is pulled the way the drills pull
it: the switch-side end of the link goes down, so the host sees carrier
loss and the controller hears a port status.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from testbed.fabric.model import Fabric, Link

from . import ledger, netlink

EVENT_PREFIX = "event "  # how the controller's events appear in its log
CONVERGE_TIMEOUT_S = 10.0


class NoFabric(RuntimeError):
    """No fabric is up, or the one recorded is not usable from here."""


@dataclass
class Live:
    record: dict  # the ledger's record
    fabric: Fabric
    run_dir: str

    @property
    def controller_log(self) -> str:
        return os.path.join(self.run_dir, "controller.log")

    def host_pid(self, host: str) -> int:
        """The PID of the process holding `host`'s network namespace."""
        for proc in self.record.get("processes", ()):
            if proc.get("host") == host and ledger.is_same_process(proc["pid"], proc.get("start")):
                return proc["pid"]
        raise NoFabric(f"host {host}'s namespace is not recorded as running (is the fabric still coming up?)")

    def ns_argv(self, host: str, argv: list) -> list:
        """argv run inside `host`'s network namespace."""
        return ["nsenter", f"--net=/proc/{self.host_pid(host)}/ns/net", *argv]

    def switch_end(self, link: Link):
        """The end of `link` on a switch (the one a cable pull sets down)."""
        return link.b if self.fabric.nodes[link.b.node].is_switch else link.a


def find() -> Live:
    """The running fabric, or NoFabric saying why there is none."""
    led = ledger.load()
    if led is None or not led.owner_running():
        name = os.environ.get("HPNLAB_FABRIC")
        if name:
            raise NoFabric(f"no fabric named {name} is up: start one with 'hpnlab --fabric {name} up FILE'")
        raise NoFabric("no fabric is up: start one with 'hpnlab up FILE' in another shell")
    run_dir = led.data.get("run_dir")
    try:
        fd = os.open(os.path.join(run_dir, "fabric.json"), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            fabric = Fabric.from_dict(json.load(fh))
    except (OSError, TypeError, ValueError, KeyError) as e:
        raise NoFabric(f"fabric {led.data.get('fabric')!r} is coming up or going down ({e})") from None
    return Live(led.data, fabric, run_dir)


def find_link(fabric: Fabric, a: str, b: str, index: int = 0) -> Link:
    """The `index`-th link between nodes `a` and `b`, or ValueError saying
    what is there instead."""
    for name in (a, b):
        if name not in fabric.nodes:
            raise ValueError(f"{name!r} is not a node of fabric {fabric.name}")
    links = fabric.links_between(a, b)
    if not links:
        raise ValueError(f"no link between {a} and {b} in fabric {fabric.name}")
    if not 0 <= index < len(links):
        raise ValueError(f"{a} and {b} have {len(links)} link(s): --index 0..{len(links) - 1}, got {index}")
    return links[index]


def is_up(ifname: str) -> bool | None:
    """Whether interface `ifname` (in this namespace) is administratively
    up; None when it does not exist."""
    try:
        with open(f"/sys/class/net/{ifname}/flags") as fh:
            return bool(int(fh.read(), 16) & 0x1)  # IFF_UP
    except OSError:
        return None


def link_states(live: Live) -> list[tuple[Link, bool | None]]:
    """Every link of the fabric with whether it is up: every switch-side end
    of it up (a failed switch sets its own ends down, whichever end of a
    switch-to-switch link the drills would pull); None when none is seen."""
    out = []
    for link in live.fabric.links:
        ends = [e for e in (link.a, link.b) if live.fabric.nodes[e.node].is_switch]
        seen = [up for up in (is_up(e.ifname) for e in ends) if up is not None]
        out.append((link, all(seen) if seen else None))
    return out


def events(text: str) -> list[dict]:
    """The controller's events in (part of) its log, in order."""
    out = []
    for line in text.splitlines():
        if line.startswith(EVENT_PREFIX):
            try:
                out.append(json.loads(line[len(EVENT_PREFIX) :]))
            except json.JSONDecodeError:
                continue
    return out


def routes_for(evs: list[dict], ports, up: bool) -> dict | None:
    """The first `routes` event (a version every switch acknowledged) that
    counts every switch port of `ports` (one (switch, port) pair, or a
    list of them) as up (`up`) or down."""
    wanted = {tuple(ports)} if isinstance(ports, tuple) else {tuple(p) for p in ports}
    for ev in evs:
        if ev.get("event") == "routes":
            down = {tuple(p) for p in ev.get("down", ())}
            if (not (wanted & down)) if up else wanted <= down:
                return ev
    return None


def last_routes(evs: list[dict]) -> dict | None:
    return next((ev for ev in reversed(evs) if ev.get("event") == "routes"), None)


def read_from(path: str, offset: int) -> tuple[str, int]:
    """(the text of `path` from byte `offset`, the new end offset)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return "", offset
    whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
    return whole.decode("utf-8", "replace"), offset + len(whole)


def set_link(
    live: Live, link: Link, up: bool, timeout: float = CONVERGE_TIMEOUT_S
) -> tuple[dict | None, float]:
    """Pull (up=False) or replug a cable and wait until the controller has a
    routes version every switch acknowledged that counts the change:
    (that routes event, or None after `timeout`; seconds it took)."""
    return _set_ends(live, [live.switch_end(link)], [link], up, timeout)


def switch_links(fabric: Fabric, name: str) -> list[Link]:
    """Every link of switch `name`, or ValueError saying what `name` is."""
    node = fabric.nodes.get(name)
    if node is None or not node.is_switch:
        raise ValueError(f"{name!r} is not a switch of fabric {fabric.name}")
    return [link for link in fabric.links if name in (link.a.node, link.b.node)]


def set_switch(
    live: Live, name: str, up: bool, timeout: float = CONVERGE_TIMEOUT_S
) -> tuple[dict | None, float]:
    """Fail (up=False) or restore a whole switch: every one of its ports
    goes down (its neighbours lose carrier), and the wait is for a routes
    version that counts all of them."""
    links = switch_links(live.fabric, name)
    ends = [link.a if link.a.node == name else link.b for link in links]
    return _set_ends(live, ends, links, up, timeout)


def _set_ends(
    live: Live, ends: list, links: list[Link], up: bool, timeout: float
) -> tuple[dict | None, float]:
    """Set `ends` (interfaces of `links`) down or up, count the flushed
    queues as gone, and wait for the routes version that counts them."""
    offset = os.path.getsize(live.controller_log) if os.path.exists(live.controller_log) else 0
    start = time.monotonic()
    done: list[str] = []
    try:
        cables = netlink.Namespace(None)  # the switches' namespace, this process's
        try:
            for end in ends:
                cables.set_up(end.ifname, up)
                done.append(end.ifname)
        finally:
            cables.close()
    except OSError as e:
        what = "replugged" if up else "pulled"
        changed = f" ({', '.join(done)} did change)" if done else ""
        raise NoFabric(f"the cable could not be {what}: {e.strerror}{changed}") from None
    record_by_hand(live.run_dir, live.fabric, links, up, start, time.monotonic())
    if live.fabric.queues is not None:  # the kernel flushed both ends' queues, as in a drill's fault
        from .queues import QueueEngine, QueueSetupError

        try:
            engine = QueueEngine(live.fabric).attach_pinned()
        except QueueSetupError as e:
            raise NoFabric(f"the queue engine's counters cannot be opened ({e})") from None
        try:
            engine.reset([e.ifname for link in links for e in (link.a, link.b)])
        finally:
            engine.detach()
    ports = [(end.node, end.port) for end in ends]
    seen: list[dict] = []
    while time.monotonic() - start < timeout:
        text, offset = read_from(live.controller_log, offset)
        seen += events(text)
        ev = routes_for(seen, ports, up)
        if ev is not None:
            return ev, time.monotonic() - start
        time.sleep(0.01)  # polling the log for the controller's event, with a deadline
    return None, time.monotonic() - start


# Cables pulled by hand (`hpnlab link`, `hpnlab switch`) while `traffic
# start` plays: recorded in the fabric's run folder on the machine's
# monotonic clock (one clock for every process), so that the run's report
# counts them among its faults (read_by_hand).
BY_HAND = "faults-by-hand.jsonl"


def record_by_hand(
    run_dir: str, fabric: Fabric, links: list[Link], up: bool, issued: float, applied: float
) -> None:
    """Append a fault record per link to the fabric's run folder (root's,
    0700); a folder that cannot take it loses only the record."""
    lines = []
    for link in links:
        between = fabric.links_between(link.a.node, link.b.node)
        record = {
            "issued_mono": issued,
            "applied_mono": applied,
            "action": "link-up" if up else "link-down",
            "link": [link.a.node, link.b.node],
            "index": between.index(link),
            "link_name": link.name,
        }
        lines.append(json.dumps(record) + "\n")
    try:
        fd = os.open(
            os.path.join(run_dir, BY_HAND), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600
        )
    except OSError:
        return
    with os.fdopen(fd, "a") as fh:
        fh.write("".join(lines))


def read_by_hand(run_dir: str, t0: float, until: float) -> list[dict]:
    """The faults pulled by hand from `t0` (a run's zero, monotonic) to
    `until` seconds after it, as a drill's timeline records its own: times
    in seconds from t0, `by_hand` set."""
    try:
        fd = os.open(os.path.join(run_dir, BY_HAND), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    with os.fdopen(fd) as fh:
        text = fh.read()
    out = []
    for line in text.splitlines():
        try:
            r = json.loads(line)
            issued = r["issued_mono"] - t0
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= issued <= until:
            out.append(
                {
                    "at": round(issued, 4),
                    "issued_at": round(issued, 4),
                    "applied_at": round(r["applied_mono"] - t0, 4),
                    "action": r["action"],
                    "link": r["link"],
                    "index": r["index"],
                    "link_name": r["link_name"],
                    "by_hand": True,
                }
            )
    return out
