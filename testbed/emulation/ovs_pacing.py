"""Pacing of Open vSwitch's passes on the userspace datapath.

Open vSwitch's main thread reads every port of every bridge on each pass of
its loop, allocating buffers for each, and a pass costs about the same
whether it finds one frame or thirty. At a fabric's rates frames arrive
one by one, so each pays for most of a pass: that fixed cost is most of
the daemon's CPU per packet-hop. The pacer (pacer/ovs_pass_pacer.c,
preloaded into ovs-vswitchd) makes the thread wait, before it polls again,
until a gap has passed since its last poll, so each pass finds more frames.

The gap is the time the fabric's fastest link takes to carry four full
RoCE frames' payloads: a port then delivers at most about four frames per
pass, so a modeled queue sees its frames in fours at worst, below any ECN
threshold (the shipped drills mark from about six frames on, most from
tens) or pause level, and a frame waits at most four frame times of the
fastest link more per hop. (Two frames per pass until 2026-11-29: four
takes a fifth to a quarter more off the daemon's CPU per packet-hop, measured in
docs/numbers.md.) It is capped at MAX_GAP_US, so that the
controller's messages and the ports' reports wait no longer than that.
Measured in docs/numbers.md ("Passes paced").

Standard library only: scripts/provision.sh builds the library through
capabilities, before the virtualenv exists.
"""

import os

from . import compiled

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pacer", "ovs_pass_pacer.c")
LIBRARY_DIR = compiled.LIBRARY_DIR
LIBRARY_PREFIX = "hpnlab-ovs-pacer-"
GAP_FILE_ENV = "HPNLAB_OVS_PASS_GAP_FILE"  # read by the pacer: the file holding the gap
GAP_FILE_NAME = "hpnlab-pass-gap-us"  # in the run folder of the Open vSwitch the fabric uses
FRAME_PAYLOAD_BYTES = 4096  # a full RoCE frame's payload: the fabric's common large frame
FRAMES_PER_PASS = 4
MAX_GAP_US = 2000


def pass_gap_us(fabric):
    """The pause between the daemon's passes for `fabric` (microseconds):
    FRAMES_PER_PASS frame payloads' time at its fastest shaped link, at
    most MAX_GAP_US; 0 (no pacing) for a fabric with a lossless class."""
    # A fabric with a lossless class runs unpaced: a pause must hold its
    # upstream within about two frames (the headroom), and the frames a paced
    # daemon holds during a gap arrive after the pause took hold. With it
    # paced, incast-pfc's lossless class dropped 4 frames in one full suite
    # run, and two attempts before that failed the pause_lag trust check.
    if fabric.queues is not None and fabric.queues.lossless:
        return 0
    fastest = max(fabric.scaled_bps(link) for link in fabric.links)
    return int(min(MAX_GAP_US, FRAMES_PER_PASS * FRAME_PAYLOAD_BYTES * 8 / fastest * 1e6))


def gap_file(ovs_rundir):
    """Where a fabric writes its gap for the Open vSwitch of `ovs_rundir`."""
    return os.path.join(ovs_rundir, GAP_FILE_NAME)


compiler = compiled.compiler  # the C compiler that builds the pacer, or None


def build_library(out_dir=LIBRARY_DIR):
    """The compiled pacer, built once per version of its source; None when
    no C compiler is there (Open vSwitch then runs unpaced).
    RuntimeError when it does not compile."""
    return compiled.shared_library(SOURCE, LIBRARY_PREFIX, libs=("-ldl",), out_dir=out_dir)


def current_library(out_dir=LIBRARY_DIR):
    """Where build_library puts the pacer of this version of its source."""
    return compiled.versioned_path(SOURCE, out_dir, LIBRARY_PREFIX, ".so")


def maps_hold_pacer(maps_text, library):
    """True when a process's memory map (/proc/PID/maps) holds the pacer
    `library` (a daemon started before the source changed holds another)."""
    name = os.path.basename(library)
    return any(line.rsplit("/", 1)[-1] == name for line in maps_text.splitlines())


def environ_names_gap_file(raw: bytes):
    """True when a process's environment (/proc/PID/environ) tells the
    pacer where its gap file is."""
    return any(v.startswith(GAP_FILE_ENV.encode() + b"=") for v in raw.split(b"\0"))
