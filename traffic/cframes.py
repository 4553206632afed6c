"""The agents' per-frame work in C (c/frames.c), through ctypes.

An agent's CPU per frame is what limits how large a fabric this machine
emulates. This library takes the interpreter out of what is done for each
ordinary data frame: it patches and sends a run of a transfer's middle
frames with one call, and receives up to `SLOTS` frames with one
`recvmmsg()`, grouping the frames the receive fast path takes without
answering into runs that the agent handles with one look at their
transfer. Every decision stays in Python and is the same as without the
library (what it saves is in docs/numbers.md). A drill builds it
(testbed/drill/agents.py); `load` returns None when there is none, and
the agent then does that work in Python too."""

from __future__ import annotations

import ctypes
import os
import socket
import stat
import struct

from .roce import BTH_LEN, ICRC_LEN

SLOTS = 64  # frames one receive() call reads at most
RECORD = struct.Struct("<IIIHHIBBH")  # c/frames.c's struct record
FRAMES_ENV = "HPNLAB_AGENT_FRAMES"  # "python": do without the library (comparisons)


class SendOutcome:
    """What send_middles reports beside the frames it sent."""

    __slots__ = ("status", "err")

    def __init__(self) -> None:
        self.status = ctypes.c_int()
        self.err = ctypes.c_int()


class CFrames:
    """The loaded library: one per agent process."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        self.path = path
        c_int, c_uint32, ptr = ctypes.c_int, ctypes.c_uint32, ctypes.POINTER
        self._send = lib.send_middles
        self._send.restype = c_int
        self._send.argtypes = [
            c_int,
            ctypes.c_void_p,
            c_int,
            c_int,
            c_uint32,
            c_int,
            c_uint32,
            ctypes.c_void_p,
            ptr(c_int),
            ptr(c_int),
        ]
        self._recv = lib.receive
        self._recv.restype = c_int
        i64 = ctypes.c_int64
        self._recv.argtypes = [c_int, ctypes.c_void_p, c_int, c_int, ctypes.c_void_p, ctypes.c_void_p]
        self._recv.argtypes += [ptr(c_int), ptr(i64), ptr(i64), ptr(i64), ptr(c_int)]
        self._tables: dict[int, ctypes.Array] = {}

    def tables(self, tables: list[list[int]]) -> ctypes.Array:
        """A template's four PSN tables as one C array (made once per set)."""
        key = id(tables)
        arr = self._tables.get(key)
        if arr is None:
            arr = (ctypes.c_uint32 * 1024)(*(v for row in tables for v in row))
            self._tables[key] = arr
        return arr

    def sender(self, buf: bytearray, bth_off: int, psn0_icrc: int, tables: list[list[int]]) -> CSend:
        return CSend(self, buf, bth_off, psn0_icrc, tables)

    def receiver(self, slot_size: int) -> CReceive:
        return CReceive(self, slot_size)


class CSend:
    """Sends the middle frames of one template (see OutFlow.next_run)."""

    __slots__ = ("lib", "addr", "len", "bth_off", "psn0_icrc", "tables", "out", "_keep")

    def __init__(self, lib: CFrames, buf: bytearray, bth_off: int, psn0_icrc: int, tables: list) -> None:
        self.lib = lib
        holder = (ctypes.c_char * len(buf)).from_buffer(buf)
        self._keep = holder  # the buffer stays where C writes it
        self.addr = ctypes.addressof(holder)
        self.len = len(buf)
        self.bth_off = bth_off
        self.psn0_icrc = psn0_icrc
        self.tables = lib.tables(tables)
        self.out = SendOutcome()

    def send(self, fd: int, first: int, count: int) -> tuple[int, bool | None, int]:
        """(frames sent, outcome as Port.send_run's, errno when refused)."""
        out = self.out
        sent = self.lib._send(
            fd,
            self.addr,
            self.len,
            self.bth_off,
            first,
            count,
            self.psn0_icrc,
            self.tables,
            out.status,
            out.err,
        )
        status = out.status.value
        return sent, (True if status > 0 else False if status == 0 else None), out.err.value


class CReceive:
    """One receive socket's buffers: `SLOTS` frame slots, the records."""

    def __init__(self, lib: CFrames, slot_size: int) -> None:
        self.call = lib._recv
        self.slot_size = slot_size
        self.slots = ctypes.create_string_buffer(SLOTS * slot_size)
        self.slots_view = memoryview(self.slots).cast("B")
        self.records = ctypes.create_string_buffer(SLOTS * RECORD.size)
        self.records_view = memoryview(self.records).cast("B")
        self.sizes = (ctypes.c_int * SLOTS)()
        self.sizes_view = memoryview(self.sizes).cast("B").cast("i")
        self.frames = ctypes.c_int()
        self.nbytes = ctypes.c_int64()
        self.stamp_ns = ctypes.c_int64()
        self.read_ns = ctypes.c_int64()
        self.err = ctypes.c_int()
        self.addrs = (
            ctypes.addressof(self.slots),
            ctypes.addressof(self.records),
            ctypes.addressof(self.sizes),
        )

    def read(self, fd: int, limit: int = SLOTS) -> int:
        """Read what waits (at most `limit` frames, at most SLOTS); the
        number of records. OSError when the socket failed otherwise than
        by being empty."""
        slots, records, sizes = self.addrs
        n = self.call(
            fd,
            slots,
            self.slot_size,
            min(limit, SLOTS),
            records,
            sizes,
            self.frames,
            self.nbytes,
            self.stamp_ns,
            self.read_ns,
            self.err,
        )
        if self.err.value:
            raise OSError(self.err.value, "recvmmsg failed")
        return n

    def frame(self, slot: int) -> bytes:
        """The bytes of the frame in `slot` (a copy: slots are reused)."""
        start = slot * self.slot_size
        return self.slots_view[start : start + self.sizes_view[slot]].tobytes()

    def payload(self, slot: int) -> int:
        """A data frame's payload bytes (as receive counts them: without
        BTH, ICRC and pad)."""
        pad = self.slots_view[slot * self.slot_size + 1] >> 4 & 3
        return self.sizes_view[slot] - BTH_LEN - ICRC_LEN - pad


_ip_names: dict[int, str] = {}


def ip_name(addr: int) -> str:
    """A sender's address as the Python socket API writes it ("10.0.0.1")."""
    name = _ip_names.get(addr)
    if name is None:
        name = _ip_names[addr] = socket.inet_ntoa(addr.to_bytes(4, "little"))
    return name


_loaded: dict[str, CFrames] = {}


def roots_alone(path: str) -> bool:
    """True when `path` is absolute and it and every folder above it are
    root's and nobody else may change them (a folder with the sticky bit,
    such as /tmp, may be writable by all): the agents run as root, so a
    library anyone else could have replaced is not loaded."""
    if not os.path.isabs(path):
        return False
    here = path
    while True:
        try:
            st = os.stat(here)
        except OSError:
            return False
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_uid != 0 or (st.st_mode & 0o022 and not sticky_dir):
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here = parent


def load(path: str | None) -> tuple[CFrames | None, str]:
    """(the library at `path`, or None; which path the frames take and,
    when not the library's, why). One load per process and path."""
    if os.environ.get(FRAMES_ENV) == "python":
        return None, f"python ({FRAMES_ENV}=python)"
    if not path:
        return None, "python (no library built)"
    if not roots_alone(path):
        return None, f"python ({path} is not root's alone: not loaded)"
    lib = _loaded.get(path)
    if lib is None:
        try:
            lib = _loaded[path] = CFrames(path)
        except (OSError, AttributeError) as e:
            return None, f"python (the library did not load: {e})"
    return lib, "c"
