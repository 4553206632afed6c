"""The traffic agents' C library (traffic/c/frames.c through
traffic/cframes.py): the frames it sends are the templates' own, it stops where
the kernel stops taking them, and it reads and groups what arrives as the
receive fast path needs. Loopback and socket pairs only; no root."""

import errno
import socket
import struct

import pytest

from traffic import cframes, receiver, roce


def _template(payload=1000):
    tpl = roce.FrameTemplate(
        "02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 49200, 0x812345, 26, payload
    )
    roce.psn_tables(payload)  # the table path from the first middle frame on
    tpl.frame(1, roce.SEND_MIDDLE)
    return tpl


def _pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    return a, b


@pytest.mark.parametrize("payload", [1000, 4096])
def test_its_middle_frames_are_the_templates_own_byte_for_byte(c_frames, payload):
    tpl = _template(payload)
    icrc, tables = tpl.table_icrc(roce.SEND_MIDDLE)
    send = c_frames.sender(tpl.buf, roce.BTH_OFF, icrc, tables)
    a, b = _pair()
    with a, b:
        sent, outcome, err = send.send(a.fileno(), 1, 20)
        assert (sent, outcome, err) == (20, True, 0)
        got = [b.recv(65536) for _ in range(sent)]
    for psn, frame in zip(range(1, 21), got):
        assert frame == bytes(tpl.frame(psn, roce.SEND_MIDDLE, psn % 8 == 7))
        assert roce.verify_icrc(frame)
    assert [roce.parse_bth(f[roce.BTH_OFF :])[3] for f in got] == [p % 8 == 7 for p in range(1, 21)]


def test_a_run_stops_where_the_kernel_stops_taking_frames(c_frames):
    tpl = _template()
    send = c_frames.sender(tpl.buf, roce.BTH_OFF, *tpl.table_icrc(roce.SEND_MIDDLE))
    a, b = _pair()
    with a, b:
        sent, outcome, _ = send.send(a.fileno(), 1, 100_000)  # the peer never reads
        assert 0 < sent < 100_000 and outcome is False
        queued = 0
        b.setblocking(False)
        while True:
            try:
                b.recv(65536)
            except BlockingIOError:
                break
            queued += 1
        assert queued == sent
    a, b = _pair()
    b.close()
    with a:
        sent, outcome, err = send.send(a.fileno(), 1, 5)  # nobody at the other end: refused
    assert (sent, outcome) == (0, None) and err in (errno.ECONNREFUSED, errno.ENOTCONN, errno.EPIPE)


def _bth(op, qp, psn, ackreq=False, pad=0, payload=100):
    word = psn | (0x80000000 if ackreq else 0)
    return struct.pack("!BBHII", op, pad << 4, 0xFFFF, qp, word) + bytes(payload) + bytes(4)


@pytest.fixture
def rx():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, receiver.IP_RECVTOS, 1)
    sock.setsockopt(socket.SOL_SOCKET, receiver.SO_TIMESTAMPNS, 1)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    with sock:
        yield sock


def _send_from(src, rx, datagrams):
    """Each (payload, tos) to rx from a socket bound to `src`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        tx.bind((src, 0))
        for data, tos in datagrams:
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            tx.sendto(data, rx.getsockname())


def test_it_reads_a_batch_and_groups_the_fast_frames_into_runs(c_frames, rx):
    ect0, ce = 26 << 2 | roce.ECT0, 26 << 2 | roce.CE
    mid = roce.SEND_MIDDLE
    _send_from("127.0.0.2", rx, [(_bth(mid, 7, p), ect0) for p in (1, 2, 3)])  # one run
    _send_from("127.0.0.2", rx, [(_bth(mid, 7, 4), ce)])  # CE-marked: alone
    _send_from("127.0.0.2", rx, [(_bth(mid, 7, p, pad=2), ect0) for p in (5, 6)])  # a run again
    _send_from("127.0.0.3", rx, [(_bth(mid, 7, 7), ect0)])  # another sender: a run of its own
    _send_from("127.0.0.2", rx, [(_bth(mid, 7, 7, ackreq=True), ect0)])  # asks for an ACK: alone
    _send_from("127.0.0.2", rx, [(_bth(mid, 8, 8), ect0)])  # another QP
    _send_from("127.0.0.2", rx, [(_bth(mid, 7, 10), ect0)])  # a PSN skipped: a new run
    _send_from("127.0.0.2", rx, [(_bth(roce.SEND_LAST, 7, 11), ect0), (b"short", ect0)])
    reader = c_frames.receiver(receiver.MAX_FRAME)
    n = reader.read(rx.fileno())
    records = list(cframes.RECORD.iter_unpack(reader.records_view[: n * cframes.RECORD.size]))
    runs = [
        (cframes.ip_name(src), w1, w2 & roce.PSN_MASK, count, nbytes, op, tos & 3, fast)
        for src, w1, w2, _slot, count, nbytes, op, tos, fast in records
    ]
    assert runs == [
        ("127.0.0.2", 7, 1, 3, 300, mid, roce.ECT0, 1),
        ("127.0.0.2", 7, 4, 1, 0, mid, roce.CE, 0),
        ("127.0.0.2", 7, 5, 2, 196, mid, roce.ECT0, 1),
        ("127.0.0.3", 7, 7, 1, 100, mid, roce.ECT0, 1),
        ("127.0.0.2", 7, 7, 1, 0, mid, roce.ECT0, 0),
        ("127.0.0.2", 8, 8, 1, 100, mid, roce.ECT0, 1),
        ("127.0.0.2", 7, 10, 1, 100, mid, roce.ECT0, 1),
        ("127.0.0.2", 7, 11, 1, 0, roce.SEND_LAST, roce.ECT0, 0),
        ("127.0.0.2", 0, 0, 1, 0, 0, roce.ECT0, 0),
    ]
    assert reader.frames.value == 12 and [r[3] for r in records] == [0, 3, 4, 6, 7, 8, 9, 10, 11]
    assert reader.frame(11) == b"short" and reader.payload(5) == 98
    assert reader.nbytes.value == 11 * 116 + 5
    assert 0 < reader.stamp_ns.value <= reader.read_ns.value
    assert reader.read(rx.fileno()) == 0 and reader.frames.value == 0  # nothing more waits


def _port(sock, backlogged=False):
    """A real nic.Port around one end of a socket pair (state as __init__ sets it)."""
    from traffic.nic import Port
    from traffic.transport import LineMeter

    port = object.__new__(Port)
    vars(port).update(sock=sock, meter=LineMeter(1e8, 0.25), blocked=False, backlogged=False, errors=0)
    if backlogged:  # frames waited for the port, whose line then went idle
        port.meter.sent(1000, 0.0, False)
        port.backlogged = True
    return port


def _drained(sock):
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


@pytest.mark.parametrize("case", ["fresh", "after a gap", "queue full", "refused"])
def test_a_port_keeps_the_same_books_whichever_path_sends(c_frames, case):
    """Port.send_native against Port.send_run on the same frames: the same
    outcome, frames on the wire, meter, drain check and error counts."""
    tpl = _template()
    native = c_frames.sender(tpl.buf, roce.BTH_OFF, *tpl.table_icrc(roce.SEND_MIDDLE))
    count = 100_000 if case == "queue full" else 20
    books = []
    for how in ("python", "c"):
        a, b = _pair()
        with a, b:
            port = _port(a, backlogged=case == "after a gap")
            if case == "refused":
                b.close()
            if how == "python":
                out = port.send_run(lambda p: tpl.frame(p, roce.SEND_MIDDLE, p % 8 == 7), 1, count, 5.0)
            else:
                out = port.send_native(native, 1, count, 5.0)
            wire = [] if case == "refused" else _drained(b)
        meter = {k: v for k, v in vars(port.meter).items()}
        books.append((out, wire, meter, port.blocked, port.backlogged, port.errors))
    assert books[0] == books[1]
    (sent, _nbytes, outcome), wire, meter, blocked, _backlogged, errors = books[1]
    assert outcome is {"queue full": False, "refused": None}.get(case, True)
    assert len(wire) == sent and blocked == (outcome is False) and errors == int(outcome is None)
    if case == "after a gap":
        assert meter["resyncs"] == 1  # the kernel still held a frame: the gap was not the agent's


def test_only_a_library_nobody_but_root_could_have_written_is_loaded(tmp_path, c_frames):
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("the files a test makes are root's only when it runs as root")
    folder = tmp_path / "lib"
    folder.mkdir(mode=0o755)
    lib = folder / "frames.so"
    shutil.copy(c_frames.path, lib)
    os.chmod(tmp_path, 0o755)
    assert cframes.roots_alone(str(lib)) and cframes.load(str(lib))[1] == "c"
    os.chmod(folder, 0o777)  # anyone could have swapped it
    loaded, why = cframes.load(str(lib))
    assert loaded is None and "not root's alone" in why
    os.chmod(folder, 0o755)
    os.chmod(lib, 0o666)
    assert not cframes.roots_alone(str(lib))
    assert not cframes.roots_alone("frames.so")  # relative: wherever the agent happens to run


def test_doctor_says_whether_an_agent_would_load_the_library(tmp_path, c_frames, monkeypatch):
    import os

    from testbed.drill import agents
    from testbed.emulation import compiled

    if os.geteuid() != 0:
        pytest.skip("the files a test makes are root's only when it runs as root")
    os.chmod(tmp_path, 0o755)
    folder = tmp_path / "lib"
    folder.mkdir(mode=0o755)
    feature = agents.frames_feature(out_dir=str(folder))
    assert feature.present and feature.detail.startswith(str(folder))
    os.chmod(folder, 0o777)  # anyone could swap what the drill builds there
    feature = agents.frames_feature(out_dir=str(folder))
    assert not feature.present and "not root's alone" in feature.detail
    monkeypatch.setattr(compiled, "compiler", lambda: None)
    feature = agents.frames_feature(out_dir=str(tmp_path / "empty"))
    assert not feature.present and "no C compiler" in feature.detail
