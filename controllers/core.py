"""The controller's state machine, pure: what it knows of the switches and
the jobs, and what it does about each event.

Every method takes one event (a switch connected, its tables were read, a
port changed, a barrier was answered, jobs were announced) and returns the
actions it calls for, as records the shim (hpn_app.py) carries out over
OpenFlow: nothing here touches a socket or os-ken, so unit tests drive it
with plain values. A connection is an opaque handle: the core compares
handles and asks the shim's `is_active` whether one is still open.

State: the connected switches, their ports that are down, the program each
holds (as last read or sent), the routes version and the barriers that
fence it, the jobs and where their connections were placed (cached per set
of down ports), and the replies waiting for a version. The jobs outlive a
restart in `jobs_file`.
"""

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.fabric.model import Fabric
from testbed.fabric.paths import Routes, compute_routes
from testbed.schedule import placement
from testbed.schedule.crux.running import RunningCrux

from . import routing

# --- actions ---------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    """Report an event as a JSON line (the format is in hpn_app.py)."""

    event: dict


@dataclass(frozen=True)
class ReadState:
    """Ask a switch what it holds: flows, groups and port states."""

    conn: Any


@dataclass(frozen=True)
class Close:
    conn: Any


@dataclass(frozen=True)
class Repair:
    """Add the fixed flows a switch lacks (`have`: those it has) and remove
    flows of ours that fit no program (`strays`, as the shim read them)."""

    conn: Any
    have: frozenset
    strays: tuple


@dataclass(frozen=True)
class Program:
    conn: Any
    ops: tuple  # routing.GroupAdd | FlowSet | FlowDel


@dataclass(frozen=True)
class Barrier:
    """Fence what was sent before it; its answer carries `xid`."""

    conn: Any
    xid: int


@dataclass(frozen=True)
class ReadCounters:
    """Ask a switch for the byte counters of its marks (one connection
    each, at its first switch); the reply carries `xid`."""

    conn: Any
    xid: int


@dataclass(frozen=True)
class Answer:
    """Answer a job announcement (`reply` is the channel's callable)."""

    reply: Callable
    body: dict


Action = Emit | ReadState | Close | Repair | Program | Barrier | ReadCounters | Answer


@dataclass(frozen=True)
class PortState:
    port: int
    up: bool


class JobsFile:
    """The announced jobs and their first paths, kept beside the job socket
    so that a restarted controller places them the same way. Written
    owner-only, replaced whole."""

    def __init__(self, path: str | None):
        self.path = path

    def load(self) -> tuple[Any, Any]:
        """(announcement, paths), or (None, None) when nothing was kept."""
        if not self.path or not os.path.exists(self.path):
            return None, None
        with open(self.path) as fh:
            kept = json.load(fh)
        return kept["announce"], kept["paths"]

    def save(self, announce: Any, paths: Any) -> None:
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            json.dump({"announce": announce, "paths": paths}, fh)
        os.replace(tmp, self.path)


class Controller:
    def __init__(self, fabric: Fabric, jobs_file: JobsFile | None = None, max_port: int = 0xFFFFFF00):
        self.fabric = fabric
        self.max_port = max_port  # reserved OpenFlow ports (LOCAL, CONTROLLER, ...) sit above
        self.by_dpid = {n.dpid: n.name for n in fabric.switches()}
        self.connections: dict[str, Any] = {}  # switch name -> connection handle
        self.ports_known: set[str] = set()  # switches whose port states we have read
        self.down: set[tuple[str, int]] = set()  # (switch, port) that are down
        self.programs: dict[str, routing.SwitchProgram] = {}  # once read
        self.version = 0
        self.changes = 0  # flow and group changes sent since routes were last acknowledged
        self.pending: dict[str, int] = {}  # switch name -> barrier xid for self.version
        self.next_xid = 1
        self.routes: Routes | None = None
        self.jobs_file = jobs_file or JobsFile(None)
        # The announced jobs, and the paths chosen when they were announced:
        # a fault moves only the connections it breaks, and when it is mended
        # every connection is back where it was (where the hosts' NIC port
        # pins send it).
        self.jobs, self.base_paths = self.jobs_file.load()
        # (down ports, Crux levels as it runs) -> placement.place's result
        self.placed: dict[tuple, tuple] = {}
        self.answer: dict | None = None  # where their connections went, as last computed
        self.waiting: list[tuple[Callable, int]] = []  # (reply, routes version that answers it)
        # Crux as it runs (announced with "crux_running"): the schedule, how
        # often the marks' counters are read, whose connection each mark
        # counts, and the reading under way.
        self.crux: RunningCrux | None = None
        self.crux_poll_s = 0.0
        self.crux_keys: dict[routing.Mark, tuple[str, str]] = {}
        self.marks: dict = {}  # switch -> its marks, as last placed
        self.counting: dict[str, int] = {}  # switch -> xid of the counters asked
        self.counted: dict[routing.Mark, int] = {}
        self.last_poll: float | None = None
        self.crux_told = 0  # decisions already reported
        self.crux_profiled: set[str] = set()  # jobs whose measurements were reported
        if self.jobs is not None:
            self._start_crux(frozenset())

    # --- switches ----------------------------------------------------------
    def switch_of(self, dpid: int, conn: object) -> str | None:
        """The switch `conn` is, when it is that switch's connection in use;
        None for a connection that was refused (or replaced): what it says
        is never heard."""
        name = self.by_dpid.get(dpid)
        return name if name is not None and self.connections.get(name) is conn else None

    def connected(self, dpid: int, conn: object, is_active: Callable[[Any], bool]) -> list[Action]:
        """A switch connected (its features reply came). A datapath id the
        fabric does not have is left alone (the shim logs it)."""
        name = self.by_dpid.get(dpid)
        if name is None:
            return []
        current = self.connections.get(name)
        if current is not None and current is not conn and is_active(current):
            # Only one connection per switch: a second one claiming a
            # connected switch's datapath id is someone else's (the switch
            # itself reconnects only after its old connection closed).
            # Refused and said, never obeyed.
            return [
                Emit(
                    {
                        "event": "refused",
                        "switch": name,
                        "reason": "a second connection with the datapath id of a connected switch",
                    }
                ),
                Close(conn),
            ]
        self.connections[name] = conn
        self.programs.pop(name, None)
        return [ReadState(conn), Emit({"event": "switch", "name": name})]

    def tables_read(
        self, name: str, have: frozenset, flows: dict, groups: dict, strays: tuple
    ) -> list[Action]:
        """What switch `name` holds was read (openflow.read_state's parts):
        adopt it as its program, so a restarted controller changes nothing
        that is already right."""
        conn = self.connections[name]
        self.programs[name] = routing.SwitchProgram(groups=groups, flows=flows)
        event = {"event": "adopted", "switch": name, "routes": len(flows), "groups": len(groups)}
        return [
            Repair(conn, frozenset(have), tuple(strays)),
            Emit({**event, "removed": len(strays)}),
            *self._reprogram(),
        ]

    def ports_read(self, name: str, ports: list[PortState]) -> list[Action]:
        """Every port's state of switch `name` (PortState records)."""
        for p in ports:
            self._set_port(name, p.port, p.up)
        self.ports_known.add(name)
        return self._reprogram()

    def port_changed(self, name: str, port: int, up: bool) -> list[Action]:
        actions: list[Action] = [Emit({"event": "port", "switch": name, "port": port, "up": up})]
        if self._set_port(name, port, up):
            actions += self._reprogram()
        return actions

    def _set_port(self, name: str, port: int, up: bool) -> bool:
        """Record a port state; True when it changed."""
        if port > self.max_port:
            return False
        key = (name, port)
        was_down = key in self.down
        if up:
            self.down.discard(key)
        else:
            self.down.add(key)
        return was_down == up

    # --- jobs ----------------------------------------------------------------
    def announced(self, request: Any, reply: Callable) -> list[Action]:
        """Jobs announced: place them (refusing what cannot be placed), keep
        them, and reprogram; the reply waits for the version that installs
        their pins to be acknowledged by every switch."""
        jobs = request.get("announce") if isinstance(request, dict) else None
        if not isinstance(jobs, dict) or not isinstance(jobs.get("jobs"), list):
            return [Answer(reply, {"error": 'expected {"announce": {"jobs": [...]}}'})]
        down = frozenset(self.down)
        try:
            routes = compute_routes(self.fabric, down)
            self.jobs = jobs
            self._start_crux(down)
            placed = placement.place(self.fabric, routes, jobs, down, levels=self._crux_levels())
        except (KeyError, TypeError, ValueError) as e:
            self.jobs, self.crux = None, None
            return [Answer(reply, {"error": f"cannot place the jobs: {type(e).__name__}: {e}"})]
        answer = placed[0]
        # placing again while keeping these very paths gives the same
        # result: the reprogramming below takes it from the cache
        self.jobs, self.base_paths = jobs, placement.chosen_paths(answer)
        self.placed = {(down, self._levels_key()): placed}
        self.jobs_file.save(jobs, self.base_paths)
        flows = [f for j in answer["jobs"] for f in j["flows"]]
        self.waiting.append((reply, self.version + 1))
        event = {
            "event": "jobs",
            "jobs": len(answer["jobs"]),
            "flows": len(flows),
            "pinned": sum(1 for f in flows if f.get("port")),
        }
        return [Emit(event), *self._reprogram()]

    # --- programming ---------------------------------------------------------
    def _reprogram(self) -> list[Action]:
        """Recompute every route from the model and the port states, send the
        difference to each connected switch, and fence it with a barrier."""
        everyone = set(self.by_dpid.values())
        if self.ports_known != everyone or set(self.programs) != everyone:
            return []  # wait until every switch told us its ports and its tables
        down = frozenset(self.down)
        self.routes = compute_routes(self.fabric, down)
        pins, marks = {}, {}
        if self.jobs is not None:
            # routes are a function of the down ports, and so is this: a
            # flapping link costs the placement once, not at every flap
            key = (down, self._levels_key())
            if key not in self.placed:
                self.placed[key] = placement.place(
                    self.fabric, self.routes, self.jobs, down, self.base_paths, self._crux_levels()
                )
            self.answer, pins, marks = self.placed[key]
        self.marks = marks
        self.version += 1
        self.pending = {}
        # Hosts may stop using a port that no longer reaches before the
        # switches confirm: say it now (the testbed takes only that part).
        actions: list[Action] = [
            Emit(
                {"event": "overrides", "version": self.version, "host_overrides": self.routes.host_overrides}
            )
        ]
        for name, conn in self.connections.items():
            wanted = routing.wanted_table(self.routes, name, pins.get(name), marks.get(name))
            ops, self.programs[name] = routing.diff_switch(self.programs[name], wanted)
            self.changes += len(ops)
            self.pending[name] = self.next_xid
            self.next_xid += 1
            actions += [Program(conn, tuple(ops)), Barrier(conn, self.pending[name])]
        return actions

    def barrier_answered(self, name: str, xid: int) -> list[Action]:
        """Switch `name` did everything sent before barrier `xid`. Once every
        switch has for this version, the routes stand: say so, and answer
        the announcements this version carried out."""
        if self.pending.get(name) != xid:
            return []
        del self.pending[name]
        if self.pending or self.routes is None:
            return []
        event = {
            "event": "routes",
            "version": self.version,
            "down": sorted(self.down),
            "changes": self.changes,
            "host_overrides": self.routes.host_overrides,
        }
        self.changes = 0
        answered = [w for w in self.waiting if w[1] <= self.version]
        self.waiting = [w for w in self.waiting if w[1] > self.version]
        answers = [Answer(reply, {"version": self.version, **(self.answer or {})}) for reply, _ in answered]
        return [Emit(event), *answers]

    # --- Crux as it runs -----------------------------------------------------
    def _start_crux(self, down: frozenset) -> None:
        """A running schedule for the announced crux jobs when the
        announcement asks for one ({"crux_running": {"window_s", "idle_s",
        "poll_s"}}), seeded by what the jobs declared."""
        self.crux = None
        settings = self.jobs.get("crux_running") if isinstance(self.jobs, dict) else None
        if not isinstance(settings, dict):
            return
        declared, bandwidth, levels = placement.crux_declared(
            self.fabric, compute_routes(self.fabric, down), self.jobs, down
        )
        if not declared or levels < 1:
            return
        self.crux = RunningCrux(
            declared, bandwidth, levels, float(settings["window_s"]), float(settings["idle_s"])
        )
        self.crux_poll_s = float(settings["poll_s"])
        names = {j.name for j in declared}
        self.crux_keys = {
            routing.Mark(f["dst"], f["src"], f["sport"]): (j["name"], f["name"])
            for j in self.jobs["jobs"]
            if j["name"] in names
            for f in j["flows"]
        }

    def _crux_levels(self) -> dict | None:
        return dict(self.crux.levels) if self.crux is not None else None

    def _levels_key(self) -> tuple | None:
        levels = self._crux_levels()
        return None if levels is None else tuple(sorted(levels.items()))

    def tick(self, now: float) -> list[Action]:
        """Time passed (the shim calls this often): when Crux runs, read the
        marks' counters every poll interval, one reading at a time."""
        if self.crux is None or self.counting or self.answer is None:
            return []
        if self.last_poll is not None and now - self.last_poll < self.crux_poll_s:
            return []
        self.last_poll = now
        self.counted = {}
        actions: list[Action] = []
        for name, marks in sorted(self.marks.items()):
            conn = self.connections.get(name)
            if marks and conn is not None:
                self.counting[name] = self.next_xid
                actions.append(ReadCounters(conn, self.next_xid))
                self.next_xid += 1
        return actions

    def counters_read(self, name: str, xid: int, now: float, counts: dict) -> list[Action]:
        """Switch `name` answered counters request `xid` ({Mark: bytes}).
        Once every switch asked has, the running schedule sees them all
        (each connection's bytes summed over its first switches); when its
        levels change, the marks are rewritten."""
        if self.crux is None or self.counting.get(name) != xid:
            return []
        del self.counting[name]
        for key, nbytes in counts.items():
            self.counted[key] = self.counted.get(key, 0) + nbytes
        if self.counting:
            return []
        per_job: dict[str, dict[str, float]] = {}
        for key, (job, flow) in self.crux_keys.items():
            if key in self.counted:
                per_job.setdefault(job, {})[flow] = float(self.counted[key])
        changed = self.crux.observe(now, per_job)
        actions: list[Action] = [
            # the reader stamps each event's time as it comes (its "t")
            Emit({"event": "crux", "why": d.why, "levels": dict(sorted(d.levels.items()))})
            for d in self.crux.decisions[self.crux_told :]
        ]
        self.crux_told = len(self.crux.decisions)
        for job in sorted(set(self.crux.compared) - self.crux_profiled):
            self.crux_profiled.add(job)
            actions.append(Emit({"event": "crux_profile", "job": job, **self.crux.compared[job]}))
        if changed:
            actions += self._reprogram()
        return actions

    def crux_report(self) -> dict | None:
        """What the running schedule measured and decided (None without it)."""
        return None if self.crux is None else self.crux.report()
