"""The few bpf(2) calls hpnlab needs on pinned maps, through ctypes: open a
pinned map, update and read entries, and map an array into memory so that
sampling its counters costs no system call.

Kept apart from what the maps mean (testbed/emulation/queues.py).
"""

import ctypes
import ctypes.util
import mmap
import os

SYS_BPF = 321  # x86_64
BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 1, 2, 3
BPF_OBJ_GET, BPF_OBJ_GET_INFO_BY_FD = 7, 15
BPF_ANY = 0

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _ObjGet(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32), ("file_flags", ctypes.c_uint32)]


class _Elem(ctypes.Structure):
    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _InfoByFd(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    ]


def _bpf(cmd, attr):
    r = _libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return r


class PinnedMap:
    """A BPF map pinned in bpffs, open for the life of this object."""

    def __init__(self, path):
        self.path = path
        raw = path.encode() + b"\0"
        buf = ctypes.create_string_buffer(raw)
        try:
            self.fd = _bpf(BPF_OBJ_GET, _ObjGet(pathname=ctypes.addressof(buf)))
        except OSError as e:
            raise OSError(e.errno, f"cannot open the BPF map {path}: {e.strerror}") from None
        info = _MapInfo()
        _bpf(
            BPF_OBJ_GET_INFO_BY_FD,
            _InfoByFd(bpf_fd=self.fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info)),
        )
        self.key_size, self.value_size = info.key_size, info.value_size
        self.max_entries = info.max_entries
        self._mm = None

    def update(self, key: bytes, value: bytes):
        k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value, len(value))
        _bpf(
            BPF_MAP_UPDATE_ELEM,
            _Elem(map_fd=self.fd, key=ctypes.addressof(k), value=ctypes.addressof(v), flags=BPF_ANY),
        )

    def lookup(self, key: bytes):
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(self.value_size)
        _bpf(BPF_MAP_LOOKUP_ELEM, _Elem(map_fd=self.fd, key=ctypes.addressof(k), value=ctypes.addressof(v)))
        return v.raw

    def memory(self, writable=False):
        """The array's values as one mmap (BPF_F_MMAPABLE arrays only):
        entry i is at i * round_up(value_size, 8). Read-only unless
        `writable` (the first call decides)."""
        if self._mm is None:
            stride = (self.value_size + 7) & ~7
            size = -(-stride * self.max_entries // mmap.PAGESIZE) * mmap.PAGESIZE
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self._mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, prot)
        return self._mm

    def close(self):
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view of it is still alive: it goes with its last user
                pass
            self._mm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


RINGBUF_BUSY, RINGBUF_DISCARD = 1 << 31, 1 << 30
RINGBUF_HEADER = 8


class RingBuffer:
    """The reading side of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF): the
    consumer position is one writable page, the producer position and the
    data (mapped twice, so a record never wraps) follow read-only. `fd` can
    be polled: it is readable when records are waiting."""

    def __init__(self, pinned: PinnedMap):
        self.map = pinned
        self.fd = pinned.fd
        self.size = pinned.max_entries
        page = mmap.PAGESIZE
        self._cons = mmap.mmap(self.fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._prod = mmap.mmap(self.fd, page + 2 * self.size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._data = memoryview(self._prod)[page:]

    def records(self):
        """Every committed record not yet read, oldest first (bytes)."""
        out = []
        cons = int.from_bytes(self._cons[0:8], "little")
        prod = int.from_bytes(self._prod[0:8], "little")
        mask = self.size - 1
        while cons < prod:
            at = cons & mask
            head = int.from_bytes(self._data[at : at + 4], "little")
            if head & RINGBUF_BUSY:
                break
            length = head & ~(RINGBUF_BUSY | RINGBUF_DISCARD)
            if not head & RINGBUF_DISCARD:
                out.append(bytes(self._data[at + RINGBUF_HEADER : at + RINGBUF_HEADER + length]))
            cons += (length + RINGBUF_HEADER + 7) & ~7
            self._cons[0:8] = cons.to_bytes(8, "little")
        return out

    def close(self):
        self._data.release()
        self._prod.close()
        self._cons.close()
