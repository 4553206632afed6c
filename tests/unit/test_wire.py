"""The packed OpenFlow messages (controllers/wire.py) are byte for byte
what os-ken encodes for the same operations (openflow.messages_for)."""

import pytest
from fakeoftable import FakeDatapath

from controllers import openflow
from controllers.routing import (
    Detour,
    FlowDel,
    FlowSet,
    GroupAdd,
    Mark,
    Output,
    Pin,
    Route,
    SetDscp,
    ToGroup,
)

OPS = [
    GroupAdd(7, "select", (1, 2, 3)),
    GroupAdd(8, "ff", (4, 2)),
    GroupAdd(9, "select", (65000,)),
    FlowSet(Route("10.0.0.1"), ToGroup(7)),
    FlowSet(Route("10.1.2.254"), Output(5)),
    FlowSet(Detour(3, "10.0.1.4"), ToGroup(8)),
    FlowSet(Detour(65000, "10.0.1.4"), Output(1)),
    FlowSet(Pin("10.0.0.2", "10.0.1.3", 40001), ToGroup(8)),
    FlowSet(Pin("10.0.0.2", "10.0.1.3", 65535), Output(2)),
    FlowSet(Mark("10.0.0.2", "10.0.1.3", 40001), SetDscp(26)),
    FlowSet(Mark("10.0.0.2", "10.0.1.3", 1), SetDscp(0)),
    FlowSet(Mark("10.0.0.2", "10.0.1.3", 1), SetDscp(63)),
    FlowDel(Route("10.0.0.1")),
    FlowDel(Detour(3, "10.0.1.4")),
    FlowDel(Pin("10.0.0.2", "10.0.1.3", 40001)),
    FlowDel(Mark("10.0.0.2", "10.0.1.3", 40001)),
]


def os_ken_bytes(ops, first_xid):
    dp = FakeDatapath(1)
    out = []
    for i, msg in enumerate(openflow.messages_for(dp, ops), 1):
        msg.set_xid((first_xid + i) & dp.ofproto.MAX_XID)  # as os-ken's Datapath.set_xid counts
        msg.serialize()
        out.append(bytes(msg.buf))
    return out


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_each_operation_packs_as_os_ken_encodes_it(op):
    dp = FakeDatapath(1)
    dp.xid = 41
    assert openflow.encoded(dp, [op]) == os_ken_bytes([op], 41)[0]
    assert dp.xid == 42  # one xid taken, as send_msg would


def test_operations_go_back_to_back_with_their_own_xids():
    dp = FakeDatapath(1)
    dp.xid = dp.ofproto.MAX_XID - 2  # the counter wraps as os-ken's does
    assert openflow.encoded(dp, OPS) == b"".join(os_ken_bytes(OPS, dp.ofproto.MAX_XID - 2))
    assert openflow.encoded(dp, []) == b""


def test_an_unknown_operation_is_refused():
    with pytest.raises(ValueError):
        openflow.encoded(FakeDatapath(1), [("group_mod", 1, (1, 2))])
