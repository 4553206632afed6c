"""RoCEv2 frames for the traffic agents: built once with scapy, patched per packet.

An agent has to push >= 100,000 packets/s from one core, which rules out
building packets with scapy in the send loop. Instead a `FrameTemplate`
builds the complete frame once,

    Ether / IPv4 (DSCP, ECN, DF, id 0, TTL 64) / UDP (dport 4791, csum 0)
          / BTH / [AETH] / payload / ICRC

and per packet only rewrites the BTH opcode, the ackreq bit + PSN word and
(for ACK frames) the AETH word, then recomputes the ICRC: from tables of
what each PSN byte changes, for a frame length that keeps coming, else
with one incremental `zlib.crc32` call over the BTH tail.

ICRC (IBA Annex A17, RoCEv2 over IPv4): a CRC-32 over

    8 bytes 0xFF                       (stands for the IB LRH)
    IPv4 header, TOS, TTL and header checksum set to all ones
    UDP header, checksum set to all ones
    BTH with byte 4 (FECN, BECN, resv6) set to all ones
    everything after the BTH up to the ICRC (AETH, payload, pad)

stored least-significant byte first after the payload. The masked fields
are the ones switches may rewrite on the way (ECN marking, TTL, checksums,
FECN/BECN), so the ICRC survives CE marking. Everything up to and including
the UDP header is constant for a template, and so are BTH bytes 1-3 (flags,
pkey), so the CRC state after "prefix + BTH[0:4] + 0xFF" is cached per
opcode and only BTH[5:] onward is hashed per packet.

IB payloads are a multiple of 4 bytes: a template for an odd length pads
with zeros and records the pad in the BTH padcount, which `payload_length`
subtracts again.

Receivers get the UDP payload (BTH ... ICRC) from a UDP socket and parse it
with `parse_bth` / `parse_aeth` / `payload_length` (struct, no scapy).
"""

import functools
import struct
import zlib
from types import SimpleNamespace
from typing import Any


@functools.cache
def scapy_layers() -> SimpleNamespace:
    """The scapy layers a template is built from, imported on first use.
    Every `hpnlab` command reads this module's constants and parsers, and
    importing scapy costs each of them about 0.4 s; the agents call this
    before they report ready, so none of their frames waits for it."""
    from scapy.contrib import roce as scapy_roce
    from scapy.contrib.roce import AETH, BTH  # also binds UDP dport 4791 -> BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    return SimpleNamespace(roce=scapy_roce, AETH=AETH, BTH=BTH, IP=IP, UDP=UDP, Ether=Ether, Raw=Raw)


ROCE_PORT = 4791

# BTH opcodes (RC transport), plus the RoCEv2 congestion notification packet.
SEND_FIRST = 0x00
SEND_MIDDLE = 0x01
SEND_LAST = 0x02
SEND_ONLY = 0x04
ACK = 0x11  # RC Acknowledge: BTH / AETH
CNP = 0x81
DATA_OPCODES = frozenset((SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY))

# ECN codepoints (low two bits of the IPv4 TOS byte).
NOT_ECT = 0
ECT1 = 1
ECT0 = 2
CE = 3

# AETH syndrome byte: bits 6-5 say ACK (00), RNR NAK (01) or NAK (11); for
# an ACK bits 4-0 are a credit count, 0x1f meaning "credits not tracked".
AETH_ACK = 0x00
CREDITS_INVALID = 0x1F
ACK_SYNDROME = AETH_ACK | CREDITS_INVALID
NAK_PSN_SEQ_ERROR = 0x60

ETH_LEN, IP_LEN, UDP_LEN, BTH_LEN, AETH_LEN, ICRC_LEN = 14, 20, 8, 12, 4, 4
CNP_PAD_LEN = 16
BTH_OFF = ETH_LEN + IP_LEN + UDP_LEN  # 42: templates never carry IP options
PSN_MASK = 0xFFFFFF

# The BTH as struct fields: opcode, flags (pad count ...), partition key,
# FECN/BECN + destination QP, ackreq + PSN. Receivers unpack frames with it
# where they landed (parse_bth; the agent's receive fast path).
BTH_FIELDS = struct.Struct("!BBHII")
_U32 = struct.Struct("!I")
_U32LE = struct.Struct("<I")
_LRH_STANDIN = b"\xff" * 8

# The ICRC is a CRC, so linear: between two frames of one length that
# differ in some bytes, the ICRCs differ by a function of the changed bits
# and of how many bytes follow them, whatever came before. With one
# 256-entry table per byte of the PSN word, a data frame's ICRC is the
# PSN-0 ICRC XOR four table entries, instead of a CRC over its whole
# payload; a copy of a template for another flow (retarget) changes its
# ICRC the same way. A table is made from 8 CRCs (one per bit), so every
# length gets its own from its first frame on.
_byte_changes: dict[int, list[int]] = {}  # bytes after the byte -> its table
_psn_tables: dict[int, list[list[int]]] = {}  # bytes after the PSN word -> 4 tables
_copy_tables: dict[int, tuple[list[int], ...]] = {}  # frame length -> the 5 tables of retarget


def byte_changes(after: int) -> list[int]:
    """How each of the 256 values of one byte changes the CRC of a message,
    relative to a zero byte, when `after` bytes follow it."""
    table = _byte_changes.get(after)
    if table is None:
        zeros = bytes(after + 1)
        base = zlib.crc32(zeros)
        bits = [zlib.crc32(bytes((1 << b,)) + zeros[1:]) ^ base for b in range(8)]
        table = [0] * 256
        for v in range(1, 256):  # linear: a value's change is that of its bits together
            low = v & -v
            table[v] = table[v ^ low] ^ bits[low.bit_length() - 1]
        _byte_changes[after] = table
    return table


def copy_tables(length: int) -> tuple[list[int], ...]:
    """For a frame of `length` bytes, the tables of the five bytes a copy
    for another flow changes (see FrameTemplate.retarget): the UDP source
    port's two, then the destination QP's three."""
    tables = _copy_tables.get(length)
    if tables is None:
        end = length - ICRC_LEN
        fields = [ETH_LEN + IP_LEN, ETH_LEN + IP_LEN + 1, BTH_OFF + 5, BTH_OFF + 6, BTH_OFF + 7]
        tables = _copy_tables[length] = tuple(byte_changes(end - at - 1) for at in fields)
    return tables


def psn_tables(after: int) -> list[list[int]]:
    """Per byte of the PSN word (first byte first), the ICRC change each of
    its 256 values makes, with `after` bytes following the word."""
    tables = _psn_tables.get(after)
    if tables is None:
        tables = _psn_tables[after] = [byte_changes(after + 3 - i) for i in range(4)]
    return tables


def psn_change(tables: list[list[int]], word: int) -> int:
    """How much a PSN word changes the ICRC, relative to a zero word."""
    t0, t1, t2, t3 = tables
    return t0[word >> 24] ^ t1[word >> 16 & 255] ^ t2[word >> 8 & 255] ^ t3[word & 255]


def is_nak(syndrome: int) -> bool:
    """True for any NAK syndrome (bits 6-5 == 11)."""
    return syndrome & 0x60 == 0x60


def _layout(opcode):
    return "ack" if opcode == ACK else "cnp" if opcode == CNP else "data"


def _check_fields(opcode: int, aeth: bool, dscp: int, ecn: int, dqpn: int, payload_len: int) -> None:
    """Refuse a template no RoCE NIC would send."""
    if aeth != (opcode == ACK):
        raise ValueError("an AETH goes with (and only with) the ACK opcode")
    if not 0 <= dscp < 64 or not 0 <= ecn < 4:
        raise ValueError("dscp must be 0..63 and ecn 0..3")
    if not 0 <= dqpn <= PSN_MASK:
        raise ValueError("dqpn is a 24-bit number")
    if payload_len < 0:
        raise ValueError("payload_len must be >= 0")


def _bth_layers(opcode: int, dqpn: int, payload_len: int, aeth: bool, syndrome: int, msn: int):
    """The BTH (PSN 0) and what follows it up to the ICRC: a CNP's padding,
    or an ACK's AETH, then the payload padded to 4 bytes."""
    sc = scapy_layers()
    pad = -payload_len % 4
    bth = sc.BTH(opcode=opcode, padcount=pad, dqpn=dqpn, psn=0, becn=1 if opcode == CNP else 0)
    if opcode == CNP:
        padding = getattr(sc.roce, "CNPPadding", None)
        return bth / (padding() if padding else sc.Raw(bytes(CNP_PAD_LEN)))
    if aeth:
        bth = bth / sc.AETH(syndrome=syndrome, msn=msn)
    if payload_len + pad:
        bth = bth / sc.Raw(bytes(payload_len + pad))
    return bth


class FrameTemplate:
    """One prebuilt RoCEv2 frame; `frame()` patches it in place.

    `payload_len` is the application payload (ignored for CNP, whose BTH is
    followed by scapy's 16-byte CNPPadding). The frame's opcode can be
    changed per packet among opcodes of the same layout (the data opcodes
    among themselves); ACK templates need aeth=True.
    """

    def __init__(
        self,
        src_mac: str,
        dst_mac: str,
        src_ip: str,
        dst_ip: str,
        sport: int,
        dqpn: int,
        dscp: int,
        payload_len: int,
        opcode: int = SEND_MIDDLE,
        ecn: int = ECT0,
        aeth: bool = False,
    ) -> None:
        _check_fields(opcode, aeth, dscp, ecn, dqpn, payload_len)
        self._args: tuple[str, str, str, str, int, int, int] = (
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            sport,
            dqpn,
            dscp,
        )
        self.opcode, self.ecn, self.aeth = opcode, ecn, aeth
        self.syndrome, self.msn = ACK_SYNDROME, 0
        if opcode == CNP:
            payload_len = 0
        self.payload_len = payload_len
        bth = _bth_layers(opcode, dqpn, payload_len, aeth, self.syndrome, self.msn)
        sc = scapy_layers()
        pkt = (
            sc.Ether(src=src_mac, dst=dst_mac)
            / sc.IP(src=src_ip, dst=dst_ip, tos=dscp << 2 | ecn, id=0, flags="DF", ttl=64)
            / sc.UDP(sport=sport, dport=ROCE_PORT, chksum=0)
            / bth
        )
        self.buf = bytearray(bytes(pkt))
        self.aeth_off = BTH_OFF + BTH_LEN if aeth else None

        self._prefix_crc: int | None = None  # made when a frame is hashed the long way
        self._bth_rest = bytes(self.buf[BTH_OFF + 1 : BTH_OFF + 4]) + b"\xff"
        self._crc_by_opcode: dict[int, int] = {}
        self._psn0_icrc: dict[int, int] = {}  # opcode -> ICRC with a zero PSN word (table path)
        self._tail = memoryview(self.buf)[BTH_OFF + 5 : -ICRC_LEN]
        self._siblings: dict[int, FrameTemplate] | None = None  # see for_length
        if _layout(opcode) == "data":
            # Each data opcode hashed once: the copies for flows (retarget)
            # take every frame by the tables, none the long way.
            for op in sorted(DATA_OPCODES):
                self.frame(0, op)
        self.frame(0)

    def _head_crc(self, opcode):
        """CRC state after prefix + BTH[0:5] for this opcode (cached)."""
        if _layout(opcode) != _layout(self.opcode):
            raise ValueError(f"opcode {opcode:#x} does not fit a {_layout(self.opcode)} template")
        if self._prefix_crc is None:
            head = bytearray(self.buf[ETH_LEN:BTH_OFF])
            head[1] = head[8] = 0xFF  # TOS, TTL
            head[10:12] = b"\xff\xff"  # IP checksum
            head[IP_LEN + 6 : IP_LEN + 8] = b"\xff\xff"  # UDP checksum
            self._prefix_crc = zlib.crc32(_LRH_STANDIN + head)
        crc = zlib.crc32(bytes((opcode,)) + self._bth_rest, self._prefix_crc)
        self._crc_by_opcode[opcode] = crc
        return crc

    def frame(
        self,
        psn: int,
        opcode: int | None = None,
        ackreq: bool = False,
        syndrome: int | None = None,
        msn: int | None = None,
        dqpn: int | None = None,
    ) -> bytearray:
        """Patch PSN/opcode/ackreq (and AETH), recompute the ICRC, return self.buf.

        Every call writes all patchable fields, so an argument left at None
        means the template's value, not the previous call's. The returned
        bytearray is reused by the next call: send it right away. An ACK
        template's frames are hashed whole (their AETH changes), so they
        take their destination QP (`dqpn`) per frame too: one template
        serves every queue pair toward a peer.
        """
        buf = self.buf
        op = self.opcode if opcode is None else opcode
        buf[BTH_OFF] = op
        word = (psn & PSN_MASK) | (0x80000000 if ackreq else 0)
        _U32.pack_into(buf, BTH_OFF + 8, word)
        if self.aeth_off is None and syndrome is None and msn is None and dqpn is None:
            fast = self._psn0_icrc.get(op)
            if fast is not None:
                _U32LE.pack_into(buf, len(buf) - ICRC_LEN, fast ^ psn_change(self._tables, word))
                return buf
        if self.aeth_off is not None:
            s = self.syndrome if syndrome is None else syndrome
            m = self.msn if msn is None else msn
            buf[self.aeth_off : self.aeth_off + 4] = (s << 24 | m & PSN_MASK).to_bytes(4, "big")
            q = self._args[5] if dqpn is None else dqpn
            buf[BTH_OFF + 5 : BTH_OFF + 8] = (q & PSN_MASK).to_bytes(3, "big")
        elif syndrome is not None or msn is not None or dqpn is not None:
            raise ValueError("this template has no AETH")
        crc = self._crc_by_opcode.get(op)
        if crc is None:
            crc = self._head_crc(op)
        icrc = zlib.crc32(self._tail, crc)
        _U32LE.pack_into(buf, len(buf) - ICRC_LEN, icrc)
        if self.aeth_off is None:
            self._note_slow(op, word, icrc)
        return buf

    def _note_slow(self, op, word, icrc):
        """One frame hashed the long way switches its opcode to the tables
        (see psn_tables): the ICRC of a zero PSN word is this one minus
        this word's change."""
        self._tables = psn_tables(len(self.buf) - ICRC_LEN - (BTH_OFF + 12))
        self._psn0_icrc[op] = icrc ^ psn_change(self._tables, word)

    def table_icrc(self, op: int) -> tuple[int, list[list[int]]] | None:
        """(ICRC with a zero PSN word, the PSN tables) once frames of this
        opcode take the table path (see frame); None before."""
        icrc = self._psn0_icrc.get(op)
        return None if icrc is None else (icrc, self._tables)

    def for_length(self, payload_len: int) -> "FrameTemplate":
        """A template identical but for its payload length (cached), e.g.
        for the shorter last packet of a message: IP total length, IP
        checksum and UDP length differ, so it needs a frame of its own.
        The templates of one set share their cache (made at the first ask)."""
        if self._siblings is None:
            self._siblings = {self.payload_len: self}
        tpl = self._siblings.get(payload_len)
        if tpl is None:
            tpl = FrameTemplate(*self._args, payload_len, opcode=self.opcode, ecn=self.ecn, aeth=self.aeth)
            tpl._siblings = self._siblings
            self._siblings[payload_len] = tpl
        return tpl

    def retarget(self, sport: int, dqpn: int) -> "FrameTemplate":
        """A copy for another flow to the same peer: new UDP source port and
        destination QP, patched into the bytes (no scapy: building a frame
        with scapy costs about a millisecond, too much per transfer). The
        copy's ICRC, and its PSN-0 ICRC per opcode, are this template's
        XOR what the two changed fields change (no CRC over the payload:
        a transfer of a few frames paid more for that than for sending)."""
        if not 0 <= dqpn <= PSN_MASK or not 0 <= sport <= 0xFFFF:
            raise ValueError("sport is 16 bits and dqpn 24 bits")
        tpl = object.__new__(FrameTemplate)
        tpl.__dict__.update(self.__dict__)
        old_sport, old_dqpn = self._args[4], self._args[5]
        tpl._args = self._args[:4] + (sport, dqpn) + self._args[6:]
        buf = bytearray(self.buf)
        udp = ETH_LEN + IP_LEN
        buf[udp : udp + 2] = sport.to_bytes(2, "big")
        buf[BTH_OFF + 5 : BTH_OFF + 8] = dqpn.to_bytes(3, "big")
        s_hi, s_lo, q_hi, q_mid, q_lo = copy_tables(len(buf))
        ds, dq = old_sport ^ sport, old_dqpn ^ dqpn
        delta = s_hi[ds >> 8] ^ s_lo[ds & 255] ^ q_hi[dq >> 16] ^ q_mid[dq >> 8 & 255] ^ q_lo[dq & 255]
        end = len(buf) - ICRC_LEN  # the ICRC covers the bytes before it
        _U32LE.pack_into(buf, end, _U32LE.unpack_from(buf, end)[0] ^ delta)
        tpl.buf = buf
        tpl._prefix_crc = None  # made when a frame is hashed the long way
        tpl._crc_by_opcode = {}
        tpl._psn0_icrc = {op: icrc ^ delta for op, icrc in self._psn0_icrc.items()}
        tpl._tail = memoryview(buf)[BTH_OFF + 5 : -ICRC_LEN]
        # No {length: itself} yet: that cycle kept every copy and its frame
        # buffer alive until the garbage collector came by (see for_length).
        tpl._siblings = None
        return tpl

    def __len__(self):
        return len(self.buf)


FRAME_OVERHEAD = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC
IB_MTUS = (4096, 2048, 1024, 512, 256)


def payload_for_mtu(mtu: int) -> int:
    """The largest InfiniBand MTU (RoCE payload per packet) whose frame fits
    an IP MTU of `mtu` bytes: 4096 at MTU 9000, 1024 at MTU 1500."""
    for size in IB_MTUS:
        if size + FRAME_OVERHEAD - 14 <= mtu:
            return size
    raise ValueError(f"an MTU of {mtu} bytes cannot carry a RoCE packet (needs >= 296)")


# --- receiving side: the UDP payload (BTH ... ICRC) ------------------------


def parse_bth(data: bytes) -> tuple[int, int, int, bool, bool, bool]:
    """(opcode, dqpn, psn, ackreq, fecn, becn) from a UDP payload."""
    op, _flags, _pkey, w1, w2 = BTH_FIELDS.unpack_from(data)
    return (op, w1 & PSN_MASK, w2 & PSN_MASK, bool(w2 >> 31), bool(w1 >> 31), bool(w1 >> 30 & 1))


def parse_aeth(data: bytes) -> tuple[int, int]:
    """(syndrome, msn) from the AETH following the BTH."""
    v = _U32.unpack_from(data, BTH_LEN)[0]
    return v >> 24, v & PSN_MASK


def payload_length(data: bytes) -> int:
    """Application payload bytes: after BTH[/AETH], without pad and ICRC."""
    op = data[0]
    hdr = BTH_LEN + (AETH_LEN if op == ACK else CNP_PAD_LEN if op == CNP else 0)
    pad = data[1] >> 4 & 3
    return max(0, len(data) - hdr - ICRC_LEN - pad)


# --- whole frames: checks and dissection ------------------------------------


def verify_icrc(frame_bytes: bytes) -> bool:
    """True if a whole Ethernet frame is RoCEv2/IPv4 with a correct ICRC.

    Handles one 802.1Q tag and Ethernet padding (the IP total length says
    where the datagram, and so the ICRC, ends)."""
    b = bytes(frame_bytes)
    off = ETH_LEN
    etype = b[12:14]
    if etype == b"\x81\x00":
        off, etype = ETH_LEN + 4, b[16:18]
    if etype != b"\x08\x00" or len(b) < off + IP_LEN or b[off] >> 4 != 4:
        return False
    ihl = (b[off] & 0x0F) * 4
    end = off + int.from_bytes(b[off + 2 : off + 4], "big")
    udp = off + ihl
    if (
        b[off + 9] != 17
        or end > len(b)
        or end < udp + UDP_LEN + BTH_LEN + ICRC_LEN
        or int.from_bytes(b[udp + 2 : udp + 4], "big") != ROCE_PORT
    ):
        return False
    ip = bytearray(b[off:udp])
    ip[1] = ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    rest = bytearray(b[udp : end - ICRC_LEN])
    rest[6:8] = b"\xff\xff"  # UDP checksum
    rest[UDP_LEN + 4] = 0xFF  # BTH FECN/BECN/resv6
    crc = zlib.crc32(rest, zlib.crc32(ip, zlib.crc32(_LRH_STANDIN)))
    return crc.to_bytes(4, "little") == b[end - ICRC_LEN : end]


def dissect(frame_bytes: bytes) -> Any:
    """scapy's view of a frame (UDP dport 4791 dissects as BTH)."""
    return scapy_layers().Ether(bytes(frame_bytes))
