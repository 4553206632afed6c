"""Start the HPN controller on os-ken, listening on a Unix socket.

    python -I -m controllers.run --fabric FABRIC.json --listen PATH [--jobs-socket PATH]

The switches reach the controller through the socket PATH (Open vSwitch's
`unix:` controller target), which lives in the run's folder that only root
may enter: no other user of the machine can connect to it and report ports
down, nor take it over while the controller is stopped (a TCP port on
loopback is open to every local user). `--port` listens on TCP instead, for
a classic setup by hand.

(`ryu-manager controllers.hpn_app` works too where classic Ryu is installed,
with HPNLAB_FABRIC set.)
"""

import argparse
import os
import socket


class _UnixStream:
    """An accepted Unix-socket connection that os-ken's Datapath can use:
    it sets TCP_NODELAY on every connection, which a Unix socket refuses."""

    def __init__(self, sock):
        self._sock = sock

    def setsockopt(self, level, option, value):
        if level == socket.IPPROTO_TCP:
            return None  # no Nagle on a Unix socket: nothing to turn off
        return self._sock.setsockopt(level, option, value)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _serve_unix_connections():
    """Hand os-ken's connection factory a socket it can configure."""
    from os_ken.controller import controller

    factory = controller.datapath_connection_factory

    def unix_connection(sock, address):
        return factory(_UnixStream(sock), address or "unix")

    controller.datapath_connection_factory = unix_connection


def listen_on_unix_socket(path: str) -> None:
    """Prepare os-ken to listen on `path` (its StreamServer takes a path
    whose folder exists for a Unix socket). A socket left by the previous
    controller of this run is removed: only root can have put it there."""
    if os.path.lexists(path):
        os.unlink(path)
    os.umask(0o077)  # the socket file: root only, whatever the folder
    _serve_unix_connections()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabric", required=True, help="fabric model JSON (hpnlab topo show --json)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", metavar="PATH", help="Unix socket the switches connect to")
    where.add_argument("--port", type=int, help="TCP port on 127.0.0.1 instead")
    ap.add_argument("--jobs-socket", help="job channel: a Unix socket (0600) to listen on")
    args = ap.parse_args(argv)
    os.environ["HPNLAB_FABRIC"] = os.path.abspath(args.fabric)
    if args.jobs_socket:
        os.environ["HPNLAB_JOBS_SOCKET"] = os.path.abspath(args.jobs_socket)

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    cfg.CONF(args=[], project="os_ken")
    if args.listen:
        path = os.path.abspath(args.listen)
        listen_on_unix_socket(path)
        cfg.CONF.set_override("ofp_listen_host", path)
        # With a path, os-ken binds no TCP port; but left unset (or 0), it
        # would listen on its default TCP ports besides.
        cfg.CONF.set_override("ofp_tcp_listen_port", 6653)
    else:
        cfg.CONF.set_override("ofp_listen_host", "127.0.0.1")
        cfg.CONF.set_override("ofp_tcp_listen_port", args.port)
    AppManager.run_apps(["controllers.hpn_app"])


if __name__ == "__main__":
    main()
