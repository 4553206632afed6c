"""The hosts' side of the controller's reroutes: the route overrides a
host needs so that it stops sending out of ports that no longer reach a
destination, installed in every host that needs a change, all at once.

Called from the controller reader's thread with each `overrides` and
`routes` event (testbed/emulation/controller.py)."""

import time

from . import plans
from .hostrun import run_in_hosts


class HostRoutes:
    def __init__(self, ns_argv):
        self.ns_argv = ns_argv  # host, argv -> argv run in its namespace
        self.installed = {}  # host -> {dst ip: ports} applied now
        self.errors = []  # updates that failed (they fail the run)

    def apply(self, event: dict) -> None:
        """Install the event's host-route overrides; stamp when they are in
        place. An `overrides` event comes as soon as the controller has
        computed a version, before the switches have it: only what narrows a
        host's choice is taken then (it only stops using ports that no
        longer reach); the `routes` event, once every switch confirmed,
        brings the rest (a port in use again)."""
        wanted = event.get("host_overrides", {})
        early = event.get("event") == "overrides"
        commands = {}
        for host in sorted(set(wanted) | set(self.installed)):
            old = self.installed.get(host, {})
            new = {ip: tuple(p) for ip, p in wanted.get(host, {}).items()}
            if early:
                new = plans.narrowed_overrides(old, new)
            lines = plans.override_lines(old, new)
            if lines:
                commands[host] = (["ip", "-batch", "-"], "\n".join(lines) + "\n")
            self.installed[host] = new
        for host, r in run_in_hosts(self.ns_argv, commands).items():
            if r.returncode != 0:
                version = event.get("version")
                self.errors.append(f"host routes in {host} (routes version {version}): {r.stderr.strip()}")
        event["applied_t"] = time.monotonic()
