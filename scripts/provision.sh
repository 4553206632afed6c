#!/usr/bin/env bash
# Provision a machine for hpnlab: system packages, a virtualenv that also sees
# Debian's Mininet, the project installed into it, and Open vSwitch running
# (kernel datapath where the openvswitch module loads, userspace otherwise).
# Idempotent: every step checks before it acts, so a second run is quick.
# Used by `make setup`, the Vagrantfile, CI and the VM tier's disk image
# (scripts/vm/build-image.sh) alike.
#
#   provision.sh              provision this machine
#   provision.sh --packages   print the system packages it needs, one a line
#
# HPNLAB_PROVISION=image: provisioning a disk image in a chroot. A chroot
# shares the host's kernel and process table, so Open vSwitch is not started
# and no sysctl is changed then (that would act on the host); the image does
# it when it boots. A chroot is also detected and treated the same way.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${HPNLAB_VENV:-$repo/.venv}
log() { printf '[provision] %s\n' "$*"; }

# 1. System packages (Debian 12 / Ubuntu 22.04+).
# clang, llvm and libbpf-dev build the BPF queue engine (ECN marking and
# per-class counters on kernels without RED); clang and libc6-dev build
# Open vSwitch's pacer (section 4b).
pkgs=(mininet openvswitch-switch iperf3 tcpdump tshark ethtool iproute2 iputils-ping
      procps kmod python3 python3-venv python3-pip clang llvm libbpf-dev libc6-dev tmux
      libtcmalloc-minimal4)
if [ "${1:-}" = "--packages" ]; then
    printf '%s\n' "${pkgs[@]}"
    exit 0
elif [ $# -gt 0 ]; then
    echo "provision.sh: unknown argument: $1 (usage: provision.sh [--packages])" >&2
    exit 2
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "provision.sh: must run as root (try: sudo make setup)" >&2
    exit 1
fi

in_chroot() {  # / is not the root of PID 1 (unknown, in some containers: not a chroot)
    local init_root
    init_root=$(stat -L -c %d:%i /proc/1/root 2>/dev/null) || return 1
    [ "$(stat -c %d:%i /)" != "$init_root" ]
}
image_mode=0
if [ "${HPNLAB_PROVISION:-}" = image ] || in_chroot; then
    image_mode=1
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark would otherwise ask whether non-root users may capture.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "system packages present"
fi

# 2. Open vSwitch: ovs-ctl skips the kernel module when it cannot load, and
#    hpnlab then uses the userspace (netdev) datapath.
#    The userspace datapath sends every packet of every bridge through one
#    AF_PACKET socket, and packets waiting in the shaped egress queues count
#    against its send buffer (net.core.wmem_default, 208 KiB by default): past
#    that, OVS drops what the modeled queues would have held. Raise the
#    default before OVS starts; restart an idle OVS that started with less.
ovs_ctl=/usr/share/openvswitch/scripts/ovs-ctl
if [ "$image_mode" = 1 ]; then
    log "building an image (chroot): Open vSwitch and sysctls are left to its boot"
else
capabilities() {  # testbed/emulation/capabilities.py needs only the standard library
    PYTHONPATH="$repo" /usr/bin/python3 -c "from testbed.emulation import capabilities as c; $1"
}
ovs_tx_buffer=$(capabilities 'print(c.OVS_TX_BUFFER)')
ovs_rx_buffer=$(capabilities 'print(c.OVS_RX_BUFFER)')
ovs_small_buffer() {  # true when ovs-vswitchd sends with a smaller buffer than that
    capabilities 'import sys; b = c.ovs_send_buffer(); sys.exit(b is None or b >= c.OVS_TX_BUFFER)'
}
userspace=0
modprobe openvswitch 2>/dev/null || userspace=1
if [ "$userspace" = 1 ]; then
    log "no openvswitch kernel module: userspace datapath will be used"
    # Each switch port is read through a packet socket of its own, made when
    #    the port is added, with net.core.rmem_default as its receive buffer:
    #    at 208 KiB, a few tens of ms without a CPU for ovs-vswitchd lose frames.
    if [ "$(sysctl -n net.core.wmem_default)" -lt "$ovs_tx_buffer" ] ||
        [ "$(sysctl -n net.core.rmem_default)" -lt "$ovs_rx_buffer" ]; then
        printf 'net.core.wmem_default = %s\nnet.core.rmem_default = %s\n' \
            "$ovs_tx_buffer" "$ovs_rx_buffer" > /etc/sysctl.d/60-hpnlab-ovs.conf
        for key in wmem_default:$ovs_tx_buffer rmem_default:$ovs_rx_buffer; do
            if [ "$(sysctl -n "net.core.${key%%:*}")" -lt "${key#*:}" ]; then
                sysctl -q -w "net.core.${key%%:*}=${key#*:}"
                log "net.core.${key%%:*} raised to ${key#*:} (Open vSwitch buffers)"
            fi
        done
    fi
fi
# 3. On the userspace datapath, ovs-vswitchd runs with tcmalloc preloaded:
#    it allocates and frees MTU-sized packet buffers for every port it polls,
#    which glibc's malloc serves slowly (capabilities.OVS_MALLOC_FEATURE;
#    docs/numbers.md has the measurements).
ovs_malloc=""
[ "$userspace" = 1 ] && ovs_malloc=$(capabilities 'print(c.ovs_malloc_library() or "")')
# 4. ovs-vswitchd keeps no copy of the system's routing table (it would
#    rebuild it on its forwarding thread at every cable pull:
#    capabilities.OVS_ROUTE_FEATURE).
ovs_options=$(capabilities 'print(" ".join(c.OVS_VSWITCHD_OPTIONS))')
# 4b. On the userspace datapath, ovs-vswitchd's passes are spaced out by
#    four frame times while a fabric runs (capabilities.OVS_PACER_FEATURE,
#    testbed/emulation/ovs_pacing.py): a small library, built here.
ovs_pacer=""
if [ "$userspace" = 1 ]; then
    ovs_pacer=$(capabilities 'print(c.ovs_pacer_library() or "")') || ovs_pacer=""
    [ -n "$ovs_pacer" ] || log "WARNING: the pacer could not be built: Open vSwitch runs without it (more CPU per packet-hop)"
fi
ovs_gap_file=$(capabilities 'print(c.ovs_pass_gap_file())')
ovs_preload="${ovs_malloc:+$ovs_malloc }$ovs_pacer"
start_ovs() {
    if [ -n "$ovs_preload" ]; then
        LD_PRELOAD="$ovs_preload" HPNLAB_OVS_PASS_GAP_FILE="$ovs_gap_file" \
            "$ovs_ctl" start --system-id=random --ovs-vswitchd-options="$ovs_options" >/dev/null
    else
        "$ovs_ctl" start --system-id=random --ovs-vswitchd-options="$ovs_options" >/dev/null
    fi
}
ovs_without_preloads() {  # true when ovs-vswitchd should have tcmalloc or the pacer and lacks one
    { [ -n "$ovs_malloc" ] && capabilities 'import sys; sys.exit(c.ovs_malloc_in_use() is not False)'; } ||
        { [ -n "$ovs_pacer" ] && capabilities 'import sys; sys.exit(c.ovs_pacer_in_use() is not False)'; }
}
ovs_without_options() {  # true when ovs-vswitchd was started without them
    capabilities 'import sys; sys.exit(c.ovs_options_in_use() is not False)'
}
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    log "starting Open vSwitch ($ovs_options${ovs_malloc:+, with tcmalloc}${ovs_pacer:+, paced})"
    start_ovs
elif { [ "$userspace" = 1 ] && { ovs_small_buffer || ovs_without_preloads; }; } || ovs_without_options; then
    if [ -z "$(ovs-vsctl --timeout=3 list-br)" ]; then
        log "restarting Open vSwitch (no bridges) so that it runs with $ovs_options${ovs_malloc:+, tcmalloc}${ovs_pacer:+, the pacer} and the larger buffers"
        "$ovs_ctl" stop >/dev/null
        start_ovs
    else
        log "WARNING: Open vSwitch has bridges and runs without $ovs_options, a large enough transmit buffer, tcmalloc or the pacer; restart it when idle (see hpnlab doctor)"
    fi
fi
ovs-vsctl --timeout=5 show >/dev/null && log "Open vSwitch running"
fi

# 5. A virtualenv on the system Python (where Debian's Mininet lives).
if [ ! -x "$venv/bin/python" ]; then
    log "creating virtualenv $venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
# The stamp holds a hash of what decides the dependencies, not a time: a
# fresh clone is newer than any venv (a cached VM image's included), yet
# needs no reinstall when these files did not change.
stamp="$venv/.hpnlab-installed"
deps=$(cat "$repo/pyproject.toml" "$repo/constraints.txt" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$deps" ]; then
    log "installing hpnlab and its dependencies into $venv (versions from constraints.txt)"
    "$venv/bin/python" -m pip install -q --upgrade pip setuptools wheel
    "$venv/bin/python" -m pip install -q -c "$repo/constraints.txt" -e "$repo[dev]"
    echo "$deps" > "$stamp"
else
    log "hpnlab already installed in $venv"
fi
"$venv/bin/python" -c "import mininet.net, os_ken, scapy" \
    || { echo "provision.sh: the virtualenv cannot import mininet/os_ken/scapy" >&2; exit 1; }

# 6. `hpnlab` on root's PATH (sudo's secure_path has /usr/local/bin), so the
#    README's commands work as typed. A link to nothing (a clone since
#    deleted) is replaced; a link to another clone that still exists, or a
#    file that is not a link, is left alone.
link=/usr/local/bin/hpnlab
target="$venv/bin/hpnlab"
if [ -L "$link" ] && [ "$(readlink "$link")" = "$target" ]; then
    :
elif [ -L "$link" ] && [ ! -e "$link" ]; then
    ln -sfn "$target" "$link"
    log "relinked $link -> $target (it pointed at nothing)"
elif [ -e "$link" ] || [ -L "$link" ]; then
    log "WARNING: $link exists and is not this clone's; left as it is (use $target)"
else
    mkdir -p "$(dirname "$link")"
    ln -s "$target" "$link"
    log "linked $link -> $target (make uninstall removes it)"
fi
log "ready: hpnlab ($target)"
