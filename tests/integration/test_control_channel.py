"""The switches' channel to the controller admits only hpnlab: an
unprivileged local user can neither connect to it nor take its place while
the controller is stopped, and a second connection claiming a connected
switch's datapath id is refused and reported."""

import socket
import struct
import subprocess
import time

from testbed.emulation.realize import FabricNet
from testbed.fabric.scenario import load_scenario

NOBODY = 65534
# Run as nobody with the system's Python (the project's folder may be closed to it).
AS_NOBODY = [
    "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
    "/usr/bin/python3",
    "-I",
    "-c",
]
TRY = """import socket, sys
path = sys.argv[1]


def attempt(what, said):
    try:
        getattr(socket.socket(socket.AF_UNIX), what)(path)
        print(said)
    except OSError as e:
        print(what, type(e).__name__)


attempt("connect", "connected")
attempt("bind", "bound")   # a path nobody may stat is one it may not bind either
"""

OFP13, HELLO, FEATURES_REQUEST, FEATURES_REPLY, PORT_STATUS = 4, 0, 5, 6, 12
OFPPR_MODIFY, OFPPS_LINK_DOWN = 2, 1


def port_down(port_no):
    """An OpenFlow 1.3 PORT_STATUS saying port `port_no` lost its link."""
    port = struct.pack(
        "!I4x6s2x16sIIIIIIII", port_no, b"\x02" * 6, b"fake", 0, OFPPS_LINK_DOWN, 0, 0, 0, 0, 0, 0
    )
    return struct.pack("!BBHIB7x", OFP13, PORT_STATUS, 16 + len(port), 99, OFPPR_MODIFY) + port


def as_nobody(path):
    r = subprocess.run(AS_NOBODY + [TRY, path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")


def impersonate(path, dpid, timeout=10.0):
    """Connect as a switch with datapath id `dpid`: hello, then answer the
    features request. Returns True when the controller closed the
    connection afterwards."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(struct.pack("!BBHI", OFP13, HELLO, 8, 1))
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except ConnectionResetError:  # closed with what we sent still unread
                return True
            if not data:
                return True
            buf += data
            while len(buf) >= 8:
                _, kind, length, xid = struct.unpack("!BBHI", buf[:8])
                buf = buf[length:]
                if kind == FEATURES_REQUEST:
                    # the features reply and, in the same write, a port going down
                    try:
                        s.sendall(
                            struct.pack(
                                "!BBHIQIBB2xII", OFP13, FEATURES_REPLY, 32, xid, dpid, 0, 254, 0, 0, 0
                            )
                            + port_down(1)
                        )
                    except BrokenPipeError:  # closed already
                        return True
        return False
    finally:
        s.close()


def test_nobody_can_reach_or_replace_the_controller(tmp_path, leak_check):
    sc = load_scenario("scenarios/controller-restart.yaml")
    with FabricNet(sc.fabric, str(tmp_path / "run"), log=lambda *a: None) as fnet:
        path = fnet.controller.listen
        assert fnet.controller.target == f"unix:{path}"
        assert as_nobody(path)[0] == "connect PermissionError"

        # stopped, as in the controller-restart drill: its place cannot be taken
        fnet.stop_controller()
        said = as_nobody(path)
        assert said[0] == "connect PermissionError", said
        assert "bound" not in said
        since = fnet.start_controller()
        fnet.controller.wait_for(
            lambda e: e["event"] == "routes", 30, "routes after the restart", since=since
        )

        # a second connection with a real switch's datapath id (root can
        # reach the socket: hpnlab's own processes run as root)
        victim = sc.fabric.switches()[0]
        since = len(fnet.controller.events)
        assert impersonate(path, victim.dpid)
        refused = fnet.controller.wait_for(
            lambda e: e["event"] == "refused", 10, "the second connection to be refused", since=since
        )
        assert refused["switch"] == victim.name
        # what it said was not heard: no port of the switch went down
        assert not [
            e
            for e in fnet.controller.events[since:]
            if e["event"] == "port" and e.get("switch") == victim.name
        ]
        # the real switch kept its controller: a fault is still rerouted
        link = next(l for l in sc.fabric.links if victim.name in (l.a.node, l.b.node))
        since = len(fnet.controller.events)
        fnet.set_link(link, up=False)
        fnet.controller.wait_for(
            lambda e: e["event"] == "routes" and e.get("down"),
            20,
            "routes around the pulled cable",
            since=since,
        )
        fnet.set_link(link, up=True)
