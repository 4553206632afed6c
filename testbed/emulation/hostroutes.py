"""The hosts' side of the controller's reroutes: the route overrides a
host needs so that it stops sending out of ports that no longer reach a
destination, installed in every host that needs a change, all at once.

Called from the controller reader's thread with each `overrides` and
`routes` event (testbed/emulation/controller.py). The routes change over a
netlink socket kept open into each host's namespace (netlink.py): no
process is started on the way from a fault to its repair."""

import os
import threading
import time

from . import netlink, plans


class HostRoutes:
    def __init__(self, netns_of):
        self.netns_of = netns_of  # host -> the path of its network namespace
        self.installed = {}  # host -> {dst ip: ports} applied now
        self.errors = []  # updates that failed (they fail the run)
        self.namespaces = {}  # host -> netlink.Namespace, open while the fabric runs
        self.lock = threading.Lock()  # the reader thread applies; teardown closes
        self.closed = False  # torn down: nothing is opened again

    def open(self, hosts) -> None:
        """Open the hosts' sockets now, at bring-up, not at the first fault."""
        with self.lock:
            for host in hosts:
                self._namespace(host)

    def apply(self, event: dict) -> None:
        """Install the event's host-route overrides; stamp when they are in
        place. An `overrides` event comes as soon as the controller has
        computed a version, before the switches have it: only what narrows a
        host's choice is taken then (it only stops using ports that no
        longer reach); the `routes` event, once every switch confirmed,
        brings the rest (a port in use again)."""
        wanted = event.get("host_overrides", {})
        early = event.get("event") == "overrides"
        with self.lock:
            if self.closed:  # an event the teardown raced: no host needs it now
                return
            for host in sorted(set(wanted) | set(self.installed)):
                old = self.installed.get(host, {})
                new = {ip: tuple(p) for ip, p in wanted.get(host, {}).items()}
                if early:
                    new = plans.narrowed_overrides(old, new)
                changes = plans.override_changes(old, new)
                self.installed[host] = new
                failed = self._change(host, changes) if changes else None
                if failed:
                    version = event.get("version")
                    self.errors.append(f"host routes in {host} (routes version {version}): {failed}")
        event["applied_t"] = time.monotonic()

    def _namespace(self, host) -> netlink.Namespace:
        if host not in self.namespaces:
            self.namespaces[host] = netlink.Namespace(self.netns_of(host))
        return self.namespaces[host]

    def _change(self, host, changes) -> str | None:
        """Carry out `changes` in `host`; what failed first, if anything."""
        try:
            ns = self._namespace(host)
        except OSError as e:
            return f"entering its namespace: {e}"
        for ip, ports in changes:
            if ports is None:
                err = ns.request(netlink.route_delete, ip)
            else:
                missing = [p for p in ports if p not in ns.ifindex]
                if missing:
                    return f"route to {ip}: no interface {missing[0]} in the host"
                err = ns.request(netlink.route_replace, ip, [ns.ifindex[p] for p in ports])
            if err:
                what = "deleting" if ports is None else "replacing"
                return f"{what} the route to {ip}/32: {os.strerror(err)}"
        return None

    def close(self) -> None:
        """Close every socket (each holds its namespace while open)."""
        with self.lock:
            for ns in self.namespaces.values():
                ns.close()
            self.namespaces.clear()
            self.closed = True
