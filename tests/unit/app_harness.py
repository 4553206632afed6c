"""Drives the controller app (controllers/hpn_app.py) without os-ken's
event loop or a switch: fake datapaths (fakeoftable.py) and events built
by hand, one call per switch message."""

import json
from types import SimpleNamespace

from fakeoftable import OFP, PARSER, FakeDatapath

from controllers import routing
from testbed.fabric.build import build_fabric
from testbed.fabric.paths import compute_routes


def expected_tables(fabric, down=frozenset()):
    routes = compute_routes(fabric, set(down))
    return {s.name: routing.wanted_table(routes, s.name) for s in fabric.switches()}


def port(no, up=True, admin_down=False):
    return SimpleNamespace(
        port_no=no, state=0 if up else OFP.OFPPS_LINK_DOWN, config=OFP.OFPPC_PORT_DOWN if admin_down else 0
    )


def event(**msg):
    return SimpleNamespace(msg=SimpleNamespace(**msg))


def events(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


class Harness:
    def __init__(self, fabric, app):
        self.fabric, self.app = fabric, app
        self.dps = {s.name: FakeDatapath(s.dpid) for s in fabric.switches()}
        self.marks = {name: 0 for name in self.dps}
        self.dead = set()  # (switch, port) that port_desc reports down

    def features(self, name, answer=True):
        """The switch connects; `answer`: it replies to the state requests."""
        self.app.on_features(event(datapath=self.dps[name], datapath_id=self.dps[name].id))
        if answer:
            self.answer_state(name)

    def answer_state(self, name):
        dp = self.dps[name]
        self.app.on_flow_stats(event(datapath=dp, body=dp.flow_stats(), flags=0, xid=0))
        self.app.on_group_desc(event(datapath=dp, body=dp.group_desc(), flags=0))

    def port_desc(self, name):
        ports = sorted({l.end(name).port for l in self.fabric.links_of(name)})
        body = [port(p, (name, p) not in self.dead) for p in ports] + [port(OFP.OFPP_LOCAL, up=False)]
        self.app.on_port_desc(event(datapath=self.dps[name], body=body))

    def port_status(self, name, no, up=True, reason=OFP.OFPPR_MODIFY, admin_down=False):
        self.app.on_port_status(event(datapath=self.dps[name], reason=reason, desc=port(no, up, admin_down)))

    def barrier(self, name, xid):
        self.app.on_barrier(event(datapath=self.dps[name], xid=xid))

    def last_barrier_xid(self, name):
        last = self.dps[name].sent[-1]
        assert isinstance(last, PARSER.OFPBarrierRequest)
        return last.xid

    def ack_all(self):
        for name in self.dps:
            self.barrier(name, self.last_barrier_xid(name))

    def mark(self):
        """Start a new window for `new`; the full history stays in `sent`."""
        self.marks = {name: len(dp.sent) for name, dp in self.dps.items()}

    def new(self, name):
        return self.dps[name].sent[self.marks[name] :]

    def connect(self):
        for name in self.dps:
            self.features(name)
        for name in self.dps:
            self.port_desc(name)
        self.ack_all()


def make_app(tmp_path, monkeypatch, params):
    from controllers.hpn_app import HpnController

    fabric = build_fabric(params)
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(fabric.to_dict()))
    monkeypatch.setenv("HPNLAB_FABRIC", str(path))
    return Harness(fabric, HpnController())
