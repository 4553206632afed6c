"""Open vSwitch's pass pacer: the gap a fabric asks for, how a daemon is
recognised as paced, and the preloaded library pacing a program's polls."""

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.emulation import ovs_pacing
from testbed.fabric.scenario import load_fabric

ROOT = Path(__file__).resolve().parents[2]
HPN_MINI = ROOT / "topologies" / "hpn-mini.yaml"


def test_the_gap_is_four_frames_at_the_fastest_link_and_capped():
    _, fabric = load_fabric(HPN_MINI)
    fastest = max(fabric.scaled_bps(link) for link in fabric.links)
    assert fastest == pytest.approx(80e6)  # its ToR-aggregation links: twice a host port's 40 Mbit/s
    assert ovs_pacing.pass_gap_us(fabric) == int(4 * 4096 * 8 / 80e6 * 1e6)  # 1638 us
    slower = dataclasses.replace(fabric, time_dilation=2.0)
    assert ovs_pacing.pass_gap_us(slower) == ovs_pacing.MAX_GAP_US
    faster = dataclasses.replace(fabric, scale=fabric.scale / 100)  # 8 Gbit/s links
    assert ovs_pacing.pass_gap_us(faster) == 16


def test_a_fabric_with_a_lossless_class_is_not_paced():
    _, lossless = load_fabric(ROOT / "scenarios" / "incast-pfc.yaml")
    assert lossless.queues is not None and lossless.queues.lossless
    assert ovs_pacing.pass_gap_us(lossless) == 0
    _, lossy = load_fabric(ROOT / "scenarios" / "incast-pfc-off.yaml")
    assert ovs_pacing.pass_gap_us(lossy) > 0


def test_a_daemon_counts_as_paced_only_with_the_library_mapped_and_its_file_named():
    maps = (
        "7f00-7f01 r-xp 0 fd:01 12 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.9\n"
        "7f02-7f03 r-xp 0 fd:01 13 /var/lib/hpnlab/lib/hpnlab-ovs-pacer-0123456789abcdef.so\n"
    )
    lib = "/var/lib/hpnlab/lib/hpnlab-ovs-pacer-0123456789abcdef.so"
    assert ovs_pacing.maps_hold_pacer(maps, lib)
    assert not ovs_pacing.maps_hold_pacer(maps.splitlines()[0], lib)
    assert not ovs_pacing.maps_hold_pacer(maps, lib.replace("0123", "9999"))  # an older build
    env = b"PATH=/usr/bin\0HPNLAB_OVS_PASS_GAP_FILE=/run/x/hpnlab-pass-gap-us\0"
    assert ovs_pacing.environ_names_gap_file(env)
    assert not ovs_pacing.environ_names_gap_file(b"PATH=/usr/bin\0XHPNLAB_OVS_PASS_GAP_FILE=/a\0")


# A program that polls a pipe POLLS times, with the timeout (ms) of its
# first argument, and prints how long that took in microseconds; with a
# second argument the pipe holds nothing, so each poll runs to its timeout.
# The pacer must space its polls out by the gap when the program is called
# ovs-vswitchd and the gap file says so.
POLLER = r"""
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fds[2];
    int timeout = argc > 1 ? atoi(argv[1]) : 1000, empty = argc > 2;
    if (pipe(fds) != 0 || (!empty && write(fds[1], "x", 1) != 1)) return 2;
    struct pollfd p = {fds[0], POLLIN, 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 40; i++)
        if (poll(&p, 1, timeout) != !empty) return 3;
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%ld\n", (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000);
    return 0;
}
"""
POLLS, GAP_US = 40, 3000


@pytest.fixture
def built(tmp_path):
    if ovs_pacing.compiler() is None:
        pytest.skip("no C compiler")
    if os.geteuid() != 0:
        pytest.skip("the pacer reads only a gap file of root's")
    lib = ovs_pacing.build_library(out_dir=str(tmp_path / "lib"))
    daemon, other = as_daemon_and_other(POLLER, tmp_path / "poller")
    gap_file = tmp_path / "gap"
    return lib, daemon, other, gap_file


def as_daemon_and_other(source, folder):
    """The C program `source` built twice: named ovs-vswitchd, which the
    library acts on, and named otherwise, which it leaves alone."""
    folder.mkdir()
    (folder / "main.c").write_text(source)
    daemon, other = folder / "ovs-vswitchd", folder / "other-daemon"
    subprocess.run([ovs_pacing.compiler(), "-O2", "-o", str(daemon), str(folder / "main.c")], check=True)
    shutil.copy(daemon, other)
    return daemon, other


def run_preloaded(program, lib, gap_file, *args):
    """What `program` prints, run with the library preloaded and told of `gap_file`."""
    env = dict(os.environ, LD_PRELOAD=lib, **{ovs_pacing.GAP_FILE_ENV: str(gap_file)})
    r = subprocess.run([str(program), *args], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    return r.stdout


def polls_took_us(program, lib, gap_file, *args):
    return int(run_preloaded(program, lib, gap_file, *args))


def test_the_library_spaces_out_ovs_vswitchds_polls_by_the_gap_in_its_file(built):
    lib, daemon, other, gap_file = built
    gap_file.write_text(f"{GAP_US}\n")
    # the first poll is not delayed (nothing came before it); each later one waits out the gap
    assert polls_took_us(daemon, lib, gap_file) >= (POLLS - 1) * GAP_US
    # another program, or no file: not paced
    assert polls_took_us(other, lib, gap_file) < (POLLS - 1) * GAP_US / 2
    gap_file.unlink()
    assert polls_took_us(daemon, lib, gap_file) < (POLLS - 1) * GAP_US / 2


def test_a_gap_file_that_says_nothing_sensible_means_no_pacing(built):
    lib, daemon, _, gap_file = built
    for text in ("", "soon\n", "-5\n"):
        gap_file.write_text(text)
        assert polls_took_us(daemon, lib, gap_file) < (POLLS - 1) * GAP_US / 2


def test_a_paced_poll_still_ends_by_its_own_deadline_and_one_that_must_not_wait_does_not(built):
    lib, daemon, _, gap_file = built
    gap_file.write_text("10000\n")  # 10 ms, longer than the 5 ms each poll of an empty pipe allows
    took = polls_took_us(daemon, lib, gap_file, "5", "empty")
    # each poll waits out at most its 5 ms (pacing included), never 5 ms paced and 5 more polling
    assert POLLS * 5000 <= took < POLLS * 7500
    gap_file.write_text(f"{GAP_US}\n")
    assert polls_took_us(daemon, lib, gap_file, "0") < (POLLS - 1) * GAP_US / 2  # timeout 0: no wait


# A program that listens on a Unix socket (blocking with an argument, else
# not), polls it while nothing waits, lets a connection come, and accepts
# it before polling again and after; it prints whether each accept took it.
ACCEPTOR = r"""
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int blocking = argc > 1;
    int l = socket(AF_UNIX, SOCK_STREAM | (blocking ? 0 : SOCK_NONBLOCK), 0);
    struct sockaddr_un a = {AF_UNIX};
    snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "hpnlab-pacer-test-%d", getpid());
    socklen_t len = sizeof a.sun_family + 1 + strlen(a.sun_path + 1);
    if (bind(l, (struct sockaddr *)&a, len) || listen(l, 4)) return 2;
    struct pollfd p = {l, POLLIN, 0};
    if (poll(&p, 1, 0) != 0) return 3;
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, len)) return 4;
    int first = accept(l, NULL, NULL) >= 0;
    if (blocking) { printf("%d\n", first); return 0; }
    if (poll(&p, 1, 0) != !first) return 5;
    printf("%d %d\n", first, accept4(l, NULL, NULL, 0) >= 0);
    return 0;
}
"""


def test_accept_on_a_socket_the_last_poll_found_idle_fails_at_once_only_where_it_must(built, tmp_path):
    """ovs-vswitchd's passes try to accept on every listening socket; the
    library answers EAGAIN itself for a non-blocking one its last poll
    found without a connection (the kernel would have, after making and
    freeing a socket), and lets the next pass's poll find what came since."""
    lib, _, _, gap_file = built
    acceptor, plain = as_daemon_and_other(ACCEPTOR, tmp_path / "acceptor")

    def accepted(program, *args):
        return run_preloaded(program, lib, gap_file, *args).split()

    # the connection came after the poll: taken on the next pass
    assert accepted(acceptor) == ["0", "1"]
    # without the library's answer, at once (another program is left alone)
    assert accepted(plain) == ["1", "0"]
    # a socket that blocks is never answered for
    assert accepted(acceptor, "blocking") == ["1"]


# A program that binds a packet socket to the loopback interface, as the
# daemon binds one to each port, sends one frame there and counts the
# copies that socket receives: the one leaving and the one coming back in,
# or only the latter when it ignores what leaves.
TAPPER = r"""
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {
    int rx = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                            .sll_ifindex = (int)if_nametoindex("lo")};
    if (rx < 0 || bind(rx, (struct sockaddr *)&a, sizeof a)) return 2;
    unsigned char frame[60] = {0};
    frame[12] = 0x88; frame[13] = 0xb5;  /* a local experimental EtherType */
    memcpy(frame + 14, "hpnlab-pacer-test", 17);
    int tx = socket(AF_PACKET, SOCK_RAW, 0);
    if (sendto(tx, frame, sizeof frame, 0, (struct sockaddr *)&a, sizeof a) != sizeof frame) return 3;
    /* every copy that comes, until none has for 200 ms */
    int copies = 0;
    unsigned char got[2048];
    ssize_t n;
    struct pollfd p = {rx, POLLIN, 0};
    while (poll(&p, 1, 200) > 0 && (n = recv(rx, got, sizeof got, 0)) > 0)
        copies += n >= 31 && memcmp(got + 14, "hpnlab-pacer-test", 17) == 0;
    printf("%d\n", copies);
    return 0;
}
"""


def test_the_daemons_packet_sockets_no_longer_receive_the_frames_it_sends(built, tmp_path):
    lib, _, _, gap_file = built
    tapper, plain = as_daemon_and_other(TAPPER, tmp_path / "tapper")

    def copies(program):
        return int(run_preloaded(program, lib, gap_file))

    assert copies(plain) == 2  # the frame leaving lo, and coming back in
    assert copies(tapper) == 1  # only coming in: what the daemon's own filter let through
