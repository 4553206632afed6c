"""The drill's timeline puts cables pulled at the same time into one step,
so a failing switch loses its links together (pure)."""

from types import SimpleNamespace

from testbed.drill.faults import _together


def fault(at, action, link=("a", "b")):
    return (at, "fault", SimpleNamespace(at=at, action=action, link=list(link)))


def shape(steps):
    return [(at, kind, [i.action if kind != "client" else i for i in items]) for at, kind, items in steps]


def test_the_links_of_a_failing_switch_go_down_in_one_step():
    events = [fault(6, "link-down", ("a0", "t0")), fault(6, "link-down", ("a0", "t1")), fault(8, "link-up")]
    assert shape(_together(events)) == [
        (6, "cables", ["link-down", "link-down"]),
        (8, "cables", ["link-up"]),
    ]


def test_other_actions_at_the_same_time_stay_apart():
    events = [
        (1, "client", "c1"),
        fault(1, "link-down"),
        fault(1, "link-up", ("c", "d")),
        fault(1, "link-degrade", ("e", "f")),
        fault(1, "link-degrade", ("g", "h")),
        (1, "controller", {"action": "stop"}),
        fault(1, "link-down", ("x", "y")),
    ]
    assert [(k, len(items)) for _at, k, items in _together(events)] == [
        ("client", 1),
        ("cables", 1),
        ("cables", 1),
        ("rate", 1),
        ("rate", 1),
        ("controller", 1),
        ("cables", 1),
    ]


class FakeNet:
    """What run_timeline drives: the cables it was asked to pull, in calls."""

    def __init__(self, fabric):
        self.fabric, self.calls = fabric, []

    def set_links(self, links, up):
        self.calls.append(([link.name for link in links], up))

    def set_link_rate(self, link, share):
        self.calls.append(([link.name], share))


def test_a_failing_switch_is_one_call_and_its_faults_share_their_times():
    from testbed.drill.faults import run_timeline
    from testbed.fabric.build import build_fabric
    from testbed.fabric.loader import load_yaml

    fabric = build_fabric(load_yaml("topologies/hpn-mini.yaml"))
    net = FakeNet(fabric)

    def f(at, action, a, b, name, rate=None):
        return SimpleNamespace(at=at, action=action, link=[a, b], index=0, name=name, rate=rate)

    sc = SimpleNamespace(
        faults=[
            f(0, "link-down", "a0n1", "t0r0k0", "agg"),
            f(0, "link-down", "a0n1", "t1r0k0", "agg"),
            f(0, "link-degrade", "a0n0", "t0r0k0", "slow", 0.5),
            f(0, "link-up", "a0n1", "t0r0k0", "back"),
        ],
        controller_timeline=[],
    )
    applied, controller = run_timeline(net, None, [], sc, 0.0, lambda line: None)  # t0 0: nothing waits
    names = [link.name for link in fabric.links]
    assert [(len(c[0]), c[1]) for c in net.calls] == [(2, False), (1, 0.5), (1, True)]
    assert all(n in names for call in net.calls for n in call[0])
    agg = [a for a in applied if a["name"] == "agg"]
    assert len(agg) == 2 and agg[0]["issued_at"] == agg[1]["issued_at"]
    assert agg[0]["applied_at"] == agg[1]["applied_at"] >= agg[0]["issued_at"]
    assert {tuple(a["link"]) for a in agg} == {("a0n1", "t0r0k0"), ("a0n1", "t1r0k0")}
    assert [a["action"] for a in applied] == ["link-down", "link-down", "link-degrade", "link-up"]
    assert applied[2]["rate"] == 0.5 and controller == []
