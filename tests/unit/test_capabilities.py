"""Reading what the machine offers, from tool output."""

from testbed.emulation import capabilities
from testbed.emulation.capabilities import cmdline_has_options, ovs_send_buffers, ovs_socket_values


def test_ovs_send_buffers_are_read_from_ss_in_either_layout():
    one_line = (
        'p_raw UNCONN 0 0 [0]:* * users:(("ovs-vswitchd",pid=9,fd=104)) '
        "skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)\n"
        'p_raw UNCONN 0 0 [0]:* * users:(("dhclient",pid=5,fd=3)) '
        "skmem:(r0,rb212992,t0,tb4096,f0,w0,o0,bl0,d0)\n"
    )
    two_lines = (
        'p_raw UNCONN 0 0 *:t0-e1 * users:(("ovs-vswitchd",pid=9,fd=7))\n'
        "\t skmem:(r0,rb212992,t0,tb8388608,f0,w0,o176,bl0,d0)\n"
        'p_raw UNCONN 0 0 *:eth0 * users:(("other",pid=5,fd=3))\n'
        "\t skmem:(r0,rb1,t0,tb1,f0,w0,o0,bl0,d0)\n"
    )
    assert ovs_send_buffers(one_line) == [212992]
    assert ovs_send_buffers(two_lines) == [8388608]
    assert ovs_send_buffers("") == []


def test_ovs_socket_drops_are_read_per_socket_and_not_confused_with_other_fields():
    text = (
        'p_raw UNCONN 0 0 *:t0-e1 * users:(("ovs-vswitchd",pid=9,fd=7))\n'
        "\t skmem:(r0,rb212992,t0,tb8388608,f0,w0,o0,bl0,d17)\n"
        'p_raw UNCONN 0 0 [0]:* * users:(("ovs-vswitchd",pid=9,fd=8)) '
        "skmem:(r0,rb212992,t0,tb8388608,f0,w0,o0,bl0,d3)\n"
        'p_raw UNCONN 0 0 *:eth0 * users:(("other",pid=5,fd=3))\n'
        "\t skmem:(r0,rb1,t0,tb1,f0,w0,o0,bl0,d99)\n"
    )
    assert ovs_socket_values(text, "d") == [17, 3]
    assert ovs_socket_values(text, "tb") == [8388608, 8388608]


def test_lacking_names_what_is_missing_in_order():
    feats = [
        capabilities.Feature("netem", True, "ok", "delay"),
        capabilities.Feature("red", False, "no", "marking"),
    ]
    assert capabilities.lacking(feats, "red", "netem", "dctcp") == ["red", "dctcp"]
    assert capabilities.lacking(feats, "netem") == []


MAPS = """\
55d0c0a00000-55d0c0b00000 r-xp 00000000 08:01 1234 /usr/sbin/ovs-vswitchd
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0
7f1c2b000000-7f1c2b020000 r-xp 00000000 08:01 5678 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10
7f1c2c000000-7f1c2c1d0000 r-xp 00000000 08:01 9012 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd4e000000-7ffd4e021000 rw-p 00000000 00:00 0 [stack]
"""


def test_the_preloaded_allocator_is_found_in_a_memory_map_by_its_real_file():
    from testbed.emulation.capabilities import OVS_MALLOC_NAME, maps_name_library

    assert maps_name_library(MAPS, OVS_MALLOC_NAME)
    glibc_only = "\n".join(line for line in MAPS.splitlines() if "tcmalloc" not in line)
    assert not maps_name_library(glibc_only, OVS_MALLOC_NAME)
    assert not maps_name_library(MAPS.replace("minimal.so.4.5.10", "minimal_debug.so.4"), OVS_MALLOC_NAME)


def test_ovs_options_are_read_from_its_command_line_argument_by_argument():
    started = b"ovs-vswitchd\0unix:/run/db.sock\0--disable-system-route\0--pidfile\0--detach\0"
    assert cmdline_has_options(started, ("--disable-system-route",))
    assert cmdline_has_options(started, ("--pidfile", "--detach"))
    # not given, or only inside another argument
    assert not cmdline_has_options(b"ovs-vswitchd\0--pidfile\0", ("--disable-system-route",))
    assert not cmdline_has_options(b"ovs-vswitchd\0--disable-system-routes\0", ("--disable-system-route",))
