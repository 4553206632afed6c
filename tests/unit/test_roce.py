"""RoCEv2 frame templates: layout, in-place patching vs scapy, ICRC, parsing."""

import random

import pytest
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from traffic import roce

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SRC_IP, DST_IP = "10.1.0.1", "10.2.0.7"
SPORT, DQPN, DSCP = 50123, 0x12ABCD, 26


def template(payload_len, opcode=roce.SEND_MIDDLE, **kw):
    return roce.FrameTemplate(
        SRC_MAC, DST_MAC, SRC_IP, DST_IP, SPORT, DQPN, DSCP, payload_len, opcode=opcode, **kw
    )


def reference(payload_len, psn, opcode, ackreq=False, syndrome=None, msn=0, ecn=roce.ECT0):
    """The same frame built from scratch by scapy (which computes the ICRC)."""
    pad = -payload_len % 4
    bth = BTH(opcode=opcode, padcount=pad, dqpn=DQPN, psn=psn, ackreq=int(ackreq))
    if opcode == roce.CNP:
        bth.becn = 1
        bth = bth / CNPPadding()
    else:
        if syndrome is not None:
            bth = bth / AETH(syndrome=syndrome, msn=msn)
        if payload_len:
            bth = bth / Raw(bytes(payload_len + pad))
    return bytes(
        Ether(src=SRC_MAC, dst=DST_MAC)
        / IP(src=SRC_IP, dst=DST_IP, tos=DSCP << 2 | ecn, id=0, flags="DF", ttl=64)
        / UDP(sport=SPORT, dport=roce.ROCE_PORT, chksum=0)
        / bth
    )


def test_send_only_4096_layout():
    t = template(4096, opcode=roce.SEND_ONLY)
    assert len(t.buf) == 14 + 20 + 8 + 12 + 4096 + 4
    p = roce.dissect(t.buf)
    assert p[IP].tos == DSCP << 2 | roce.ECT0
    assert t.buf[15] >> 2 == DSCP and t.buf[15] & 3 == roce.ECT0
    assert p[IP].flags == "DF" and p[IP].id == 0 and p[IP].ttl == 64
    assert p[IP].len == 20 + 8 + 12 + 4096 + 4
    assert p[UDP].dport == 4791 and p[UDP].sport == SPORT and p[UDP].chksum == 0
    assert p[UDP].len == 8 + 12 + 4096 + 4
    assert p[BTH].opcode == roce.SEND_ONLY and p[BTH].dqpn == DQPN
    assert p[BTH].pkey == 0xFFFF and p[BTH].padcount == 0
    assert bytes(t.buf) == reference(4096, 0, roce.SEND_ONLY)


def test_patch_psn_then_dissect_with_scapy():
    t = template(4096, opcode=roce.SEND_ONLY)
    buf = t.frame(0x123456)
    p = roce.dissect(buf)
    assert p.haslayer(BTH)
    assert p[BTH].psn == 0x123456 and p[BTH].ackreq == 0
    # scapy recomputes the ICRC from the dissected headers: same bytes
    assert p[BTH].compute_icrc(None) == bytes(buf[-4:])
    assert roce.verify_icrc(buf)


def test_frame_returns_the_same_buffer():
    t = template(1024)
    a = t.frame(1)
    b = t.frame(2, opcode=roce.SEND_LAST, ackreq=True)
    assert a is b is t.buf
    assert len(b) == len(reference(1024, 2, roce.SEND_LAST))


@pytest.mark.parametrize("payload_len", [0, 1, 2, 3, 5, 1000, 1023, 4096])
def test_random_patches_match_scapy_byte_for_byte(payload_len):
    rng = random.Random(payload_len)
    t = template(payload_len)
    for _ in range(40):
        psn = rng.randrange(1 << 24)
        opcode = rng.choice(sorted(roce.DATA_OPCODES))
        ackreq = rng.random() < 0.5
        buf = t.frame(psn, opcode=opcode, ackreq=ackreq)
        assert bytes(buf) == reference(payload_len, psn, opcode, ackreq)


@pytest.mark.parametrize("payload_len", [4096, 1021])
def test_table_icrc_matches_scapy_from_the_first_frame_of_an_opcode(payload_len):
    """After one frame of an opcode hashed the long way, the ICRC comes
    from the PSN tables; every frame must still be the one scapy builds."""
    rng = random.Random(7 + payload_len)
    t = template(payload_len)
    for i in range(200):
        psn = rng.randrange(1 << 24) if i % 3 else i
        opcode = rng.choice(sorted(roce.DATA_OPCODES))
        ackreq = rng.random() < 0.5
        buf = t.frame(psn, opcode=opcode, ackreq=ackreq)
        assert bytes(buf) == reference(payload_len, psn, opcode, ackreq)
        assert roce.verify_icrc(buf)
    assert set(t._psn0_icrc) == roce.DATA_OPCODES  # the table path was taken for each


def test_opcode_none_means_template_opcode_not_previous_call():
    t = template(64, opcode=roce.SEND_MIDDLE)
    t.frame(5, opcode=roce.SEND_LAST, ackreq=True)
    assert bytes(t.frame(6)) == reference(64, 6, roce.SEND_MIDDLE)


def test_ack_and_nak_frames_match_scapy():
    rng = random.Random(7)
    t = template(0, opcode=roce.ACK, aeth=True)
    assert len(t.buf) == 14 + 20 + 8 + 12 + 4 + 4
    assert bytes(t.buf) == reference(0, 0, roce.ACK, syndrome=roce.ACK_SYNDROME)
    for _ in range(30):
        psn, msn = rng.randrange(1 << 24), rng.randrange(1 << 24)
        syn = rng.choice([roce.ACK_SYNDROME, roce.NAK_PSN_SEQ_ERROR])
        buf = t.frame(psn, syndrome=syn, msn=msn)
        assert bytes(buf) == reference(0, psn, roce.ACK, syndrome=syn, msn=msn)
        p = roce.dissect(buf)
        assert p[AETH].syndrome == syn and p[AETH].msn == msn and p[BTH].psn == psn
    assert roce.is_nak(roce.NAK_PSN_SEQ_ERROR) and not roce.is_nak(roce.ACK_SYNDROME)


def test_cnp_frame_matches_scapy():
    t = template(0, opcode=roce.CNP)
    assert bytes(t.frame(0)) == reference(0, 0, roce.CNP)
    p = roce.dissect(t.buf)
    assert p[BTH].opcode == roce.CNP and p[BTH].becn == 1 and p.haslayer(CNPPadding)
    assert roce.verify_icrc(t.buf)


def test_for_length_gives_a_cached_template_of_its_own():
    full = template(4096)
    tail = full.for_length(1001)
    assert full.for_length(1001) is tail and tail.for_length(4096) is full
    assert tail.payload_len == 1001 and tail.opcode == full.opcode
    buf = tail.frame(77, opcode=roce.SEND_LAST, ackreq=True)
    assert bytes(buf) == reference(1001, 77, roce.SEND_LAST, ackreq=True)
    p = roce.dissect(buf)
    assert p[IP].len == 20 + 8 + 12 + 1004 + 4 and p[BTH].padcount == 3
    assert bytes(full.frame(76)) == reference(4096, 76, roce.SEND_MIDDLE)


def test_icrc_survives_switch_rewrites_but_not_corruption():
    t = template(256)
    buf = bytearray(t.frame(42))
    buf[15] = buf[15] | roce.CE  # ECN marked CE on the way
    buf[22] -= 1  # TTL decremented
    buf[24:26] = b"\x12\x34"  # IP checksum rewritten
    buf[42 + 4] |= 0xC0  # FECN/BECN set
    assert roce.verify_icrc(buf)
    assert roce.dissect(buf)[IP].tos & 3 == roce.CE
    bad = bytearray(buf)
    bad[60] ^= 1  # payload bit flip
    assert not roce.verify_icrc(bad)
    bad = bytearray(buf)
    bad[42 + 11] ^= 1  # psn changed without new ICRC
    assert not roce.verify_icrc(bad)


def test_verify_icrc_handles_padding_vlan_and_non_roce():
    t = template(0, opcode=roce.SEND_ONLY)
    buf = bytes(t.frame(9))
    assert len(buf) == 58 and roce.verify_icrc(buf + bytes(2))  # padded to 60
    tagged = buf[:12] + b"\x81\x00\x00\x05" + buf[12:]
    assert roce.verify_icrc(tagged)
    other = bytes(
        Ether(src=SRC_MAC, dst=DST_MAC) / IP(src=SRC_IP, dst=DST_IP) / UDP(sport=1, dport=53) / Raw(bytes(20))
    )
    assert not roce.verify_icrc(other)
    assert not roce.verify_icrc(buf[:30])


def test_parse_functions_on_udp_payload():
    t = template(1001, opcode=roce.SEND_MIDDLE)
    data = bytes(t.frame(0xABCDE, opcode=roce.SEND_LAST, ackreq=True))[42:]
    assert roce.parse_bth(data) == (roce.SEND_LAST, DQPN, 0xABCDE, True, False, False)
    assert roce.payload_length(data) == 1001
    assert roce.payload_length(bytes(template(4096).frame(1))[42:]) == 4096
    assert roce.payload_length(bytes(template(0).frame(1))[42:]) == 0

    a = template(0, opcode=roce.ACK, aeth=True)
    data = bytes(a.frame(99, syndrome=roce.NAK_PSN_SEQ_ERROR, msn=3))[42:]
    assert roce.parse_bth(data)[:3] == (roce.ACK, DQPN, 99)
    assert roce.parse_aeth(data) == (roce.NAK_PSN_SEQ_ERROR, 3)
    assert roce.payload_length(data) == 0

    c = template(0, opcode=roce.CNP)
    data = bytes(c.frame(0))[42:]
    op, qp, _psn, _ackreq, fecn, becn = roce.parse_bth(data)
    assert (op, qp, fecn, becn) == (roce.CNP, DQPN, False, True)
    assert roce.payload_length(data) == 0


def test_psn_is_24_bits():
    t = template(16)
    assert roce.dissect(t.frame((1 << 24) + 5))[BTH].psn == 5


def test_layout_mismatches_are_refused():
    with pytest.raises(ValueError):
        template(0, opcode=roce.ACK)  # ACK without AETH
    with pytest.raises(ValueError):
        template(16, opcode=roce.SEND_ONLY, aeth=True)  # AETH on a data frame
    t = template(16)
    with pytest.raises(ValueError):
        t.frame(1, opcode=roce.ACK)
    with pytest.raises(ValueError):
        t.frame(1, syndrome=roce.ACK_SYNDROME)
    with pytest.raises(ValueError):
        roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, SPORT, DQPN, 64, 16)


def test_ecn_choice_lands_in_tos():
    t = template(8, ecn=roce.NOT_ECT)
    assert t.buf[15] == DSCP << 2
    assert bytes(t.frame(3)) == reference(8, 3, roce.SEND_MIDDLE, ecn=roce.NOT_ECT)


def test_retarget_matches_a_frame_built_from_scratch():
    base = roce.FrameTemplate(
        "02:00:0a:00:00:01",
        "02:00:0a:00:01:01",
        "10.0.0.1",
        "10.0.1.1",
        50000,
        0x10,
        26,
        4096,
        opcode=roce.SEND_MIDDLE,
    )
    for psn in range(3):  # frames on the original: its bytes as a flow leaves them
        base.frame(psn, opcode=roce.SEND_MIDDLE)
    moved = base.retarget(50123, 0xABCDEF)
    assert roce.verify_icrc(bytes(moved.buf))  # as copied, before any frame of its own
    assert moved.table_icrc(roce.SEND_MIDDLE) is not None  # the table path at once
    fresh = roce.FrameTemplate(
        "02:00:0a:00:00:01",
        "02:00:0a:00:01:01",
        "10.0.0.1",
        "10.0.1.1",
        50123,
        0xABCDEF,
        26,
        4096,
        opcode=roce.SEND_MIDDLE,
    )
    for psn, op, ack in (
        (0, roce.SEND_FIRST, False),
        (77, roce.SEND_MIDDLE, False),
        (0x123456, roce.SEND_LAST, True),
    ):
        assert bytes(moved.frame(psn, opcode=op, ackreq=ack)) == bytes(
            fresh.frame(psn, opcode=op, ackreq=ack)
        )
        assert roce.verify_icrc(bytes(moved.buf))
    twice = moved.retarget(4791, 0x800001)  # a copy of a copy, and an ACK's copy
    assert roce.verify_icrc(bytes(twice.frame(9))) and roce.verify_icrc(bytes(twice.buf))
    ack = template(0, opcode=roce.ACK, aeth=True).retarget(4791, 0x812345)
    assert roce.verify_icrc(bytes(ack.buf)) and roce.verify_icrc(bytes(ack.frame(5, syndrome=0x60, msn=0)))
    # an ACK template takes a frame's QP, and the next frame has its own again
    assert roce.parse_bth(bytes(ack.frame(6, dqpn=0x800009))[42:])[1] == 0x800009
    assert roce.verify_icrc(bytes(ack.buf))
    assert roce.parse_bth(bytes(ack.frame(7))[42:])[1] == 0x812345 and roce.verify_icrc(bytes(ack.buf))
    with pytest.raises(ValueError):
        moved.frame(1, dqpn=0x800009)  # a data frame's QP is its template's
    # the original is untouched
    assert roce.parse_bth(bytes(base.buf[42:]))[1] == 0x10


def test_changed_bytes_move_the_crc_as_hashing_it_again_does():
    import zlib

    rng = random.Random(11)
    for _ in range(50):
        msg = bytearray(rng.randbytes(rng.randrange(8, 300)))
        width = rng.choice((1, 2, 3, 4))
        at = rng.randrange(0, len(msg) - width + 1)
        diff = rng.randbytes(width)
        before = zlib.crc32(msg)
        change = 0
        for i, d in enumerate(diff):
            msg[at + i] ^= d
            change ^= roce.byte_changes(len(msg) - at - i - 1)[d]
        assert zlib.crc32(msg) == before ^ change
