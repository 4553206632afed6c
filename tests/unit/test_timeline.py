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
