#!/usr/bin/env bash
# `make test-vagrant`: the path a Vagrant user takes, run for real. Build a box
# from the VM tier's image (scripts/vagrant/build-box.sh), add it under the
# name the Vagrantfile uses, `vagrant up --provider=libvirt` with the
# project's Vagrantfile unchanged (its rsync folder, its provisioning), then
# `vagrant ssh -c "cd /hpnlab && sudo make demo"`, bring the demo's reports
# out to results/vagrant/ and `vagrant destroy`.
#
# Nothing of the user's Vagrant or libvirt is touched: Vagrant runs with a
# home of its own under the cache (so the box does not shadow a real
# debian/bookworm64), whose Vagrantfile holds the test's settings (a storage
# pool and a management network of its own; qemu without KVM); the machine's
# state (.vagrant) lives in a temporary folder. libvirt's daemons are used
# when they run, else started here and stopped again, with any network they
# started. The pool, the network and the VM are removed at the end, passed
# or failed; the box stays cached for the next run.
#
# Environment:
#   HPNLAB_VAGRANT_ACCEL   kvm | qemu | auto (default): KVM when a guest
#                          kernel runs under it here, else qemu's software
#                          emulation (TCG)
#   HPNLAB_VAGRANT_DILATION the demo's time dilation (default: 4 under
#                          software emulation, as the VM tier; none with KVM)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HPNLAB_VAGRANT_CACHE:-/var/cache/hpnlab/vagrant}
out=$repo/results/vagrant
accel=${HPNLAB_VAGRANT_ACCEL:-auto}
name=hpnlab-vagrant              # the storage pool's and the management network's
net_address=192.168.124.0/24     # the management network (vagrant-libvirt's default is .121)
t0=$SECONDS
phase() { printf '[test-vagrant +%ds] %s\n' "$((SECONDS - t0))" "$*"; }
die() { printf 'test-vagrant: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo make test-vagrant)"
case $accel in auto|kvm|qemu) ;; *) die "HPNLAB_VAGRANT_ACCEL must be auto, kvm or qemu, not '$accel'";; esac

# Host tools: Debian's Vagrant with its libvirt plugin, libvirt and qemu.
need=()
for p in vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils \
         dnsmasq-base rsync openssh-client; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    phase "installing host tools: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Packages must not start daemons here: this script starts what it needs
    # and stops it again (a policy-rc.d of the machine's own is left as it is).
    ours_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        ours_policy=1
    fi
    log=$(mktemp)
    rc=0
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; } >"$log" 2>&1 || rc=$?
    [ -n "$ours_policy" ] && rm -f /usr/sbin/policy-rc.d
    [ "$rc" -eq 0 ] || { tail -20 "$log" >&2; rm -f "$log"; die "installing ${need[*]} failed (log above)"; }
    rm -f "$log"
fi

phase "box (scripts/vagrant/build-box.sh)"
box=$(bash "$here/build-box.sh") || die "building the box failed"

mkdir -p "$cache"
exec 8>"$cache/.run-lock"
flock -n 8 || die "another make test-vagrant is running on this machine"
work=$(mktemp -d "$cache/run.XXXXXX")
chmod 0755 "$work"   # qemu, as libvirt's user, opens the disks in the pool below it
rm -rf "$out"
mkdir -p "$out"
export VAGRANT_HOME=$cache/home VAGRANT_DOTFILE_PATH=$work/dot VAGRANT_CHECKPOINT_DISABLE=1 \
    VAGRANT_DEFAULT_PROVIDER=libvirt LIBVIRT_DEFAULT_URI=qemu:///system
virsh() { command virsh -q -c qemu:///system "$@"; }

ip_forward=$(sysctl -n net.ipv4.ip_forward)
started_daemons=()   # PID files of the libvirt daemons this script started
vm_created=
teardown() {
    set +e
    if [ -n "$vm_created" ]; then
        phase "vagrant destroy"
        (cd "$repo" && timeout 300 vagrant destroy -f) > "$out/destroy.txt" 2>&1 \
            || phase "vagrant destroy failed (results/vagrant/destroy.txt)"
    fi
    if virsh net-info "$name" >/dev/null 2>&1; then
        virsh net-destroy "$name" >/dev/null 2>&1
        virsh net-undefine "$name" >/dev/null 2>&1
    fi
    if virsh pool-info "$name" >/dev/null 2>&1; then
        virsh pool-destroy "$name" >/dev/null 2>&1
        virsh pool-undefine "$name" >/dev/null 2>&1
    fi
    if [ ${#started_daemons[@]} -gt 0 ]; then
        # networks that the daemon started here brought up (libvirt's autostarted
        # "default" among them): down with it, as they were before
        for net in $(virsh net-list --name 2>/dev/null); do
            virsh net-destroy "$net" >/dev/null 2>&1
        done
        for pidfile in "${started_daemons[@]}"; do
            pid=$(cat "$pidfile" 2>/dev/null) && kill "$pid" 2>/dev/null
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        done
    fi
    if [ "$(sysctl -n net.ipv4.ip_forward)" != "$ip_forward" ]; then
        sysctl -q -w net.ipv4.ip_forward="$ip_forward"   # libvirt turns it on for the network
    fi
    rm -rf "$work"
}
trap teardown EXIT
trap 'exit 130' INT TERM

if ! virsh version >/dev/null 2>&1; then
    phase "starting libvirt's daemons (stopped again at the end)"
    mkdir -p /run/libvirt
    virtlogd --daemon --pid-file "$work/virtlogd.pid"
    started_daemons+=("$work/virtlogd.pid")
    libvirtd --daemon --pid-file "$work/libvirtd.pid"
    started_daemons+=("$work/libvirtd.pid")
    for _ in $(seq 100); do virsh version >/dev/null 2>&1 && break; sleep 0.2; done
    virsh version >/dev/null 2>&1 || die "libvirtd did not answer within 20 s"
fi

kvm_runs_guest() {  # a guest kernel prints its banner under KVM within 20 s (some hosts accept KVM, then never run it)
    [ -c /dev/kvm ] || return 1
    local image
    image=$(bash "$repo/scripts/vm/build-image.sh") || return 1
    timeout 20 qemu-system-x86_64 -accel kvm -cpu host,-arch-capabilities -machine q35 -m 256 \
        -display none -nodefaults -no-reboot -serial "file:$work/kvm-probe.log" \
        -kernel "$image/vmlinuz" -append "console=ttyS0 panic=-1" >/dev/null 2>&1 || true
    grep -q "Linux version" "$work/kvm-probe.log" 2>/dev/null
}
if [ "$accel" = auto ]; then
    if kvm_runs_guest; then accel=kvm; else accel=qemu; fi
fi
dilation=${HPNLAB_VAGRANT_DILATION-$([ "$accel" = qemu ] && echo 4)}

phase "adding the box as debian/bookworm64 (Vagrant home $VAGRANT_HOME)"
if [ "$(cat "$VAGRANT_HOME/hpnlab-box" 2>/dev/null)" != "$box" ]; then
    vagrant box add --force --name debian/bookworm64 --provider libvirt "$box" > "$out/box-add.txt" 2>&1 \
        || { tail -5 "$out/box-add.txt" >&2; die "vagrant box add failed (results/vagrant/box-add.txt)"; }
    echo "$box" > "$VAGRANT_HOME/hpnlab-box"
fi

mkdir -p "$work/pool"
virsh pool-define-as "$name" dir --target "$work/pool" >/dev/null
virsh pool-start "$name" >/dev/null

# The test's settings, read before the project's Vagrantfile (which wins
# where both speak: it sets only memory and CPUs for libvirt).
{
    echo 'Vagrant.configure("2") do |config|'
    echo "  config.vm.boot_timeout = $([ "$accel" = qemu ] && echo 900 || echo 180)"
    echo '  config.vm.provider :libvirt do |lv|'
    echo "    lv.driver = \"$accel\""
    [ "$accel" = qemu ] && echo '    lv.cpu_mode = "maximum"   # numpy needs more than the default model'
    echo "    lv.storage_pool_name = \"$name\""
    echo "    lv.management_network_name = \"$name\""
    echo "    lv.management_network_address = \"$net_address\""
    # no NAT and no firewall rules: the VM needs nothing beyond the host
    # (libvirt turns IP forwarding on for it; the teardown restores it)
    echo '    lv.management_network_mode = "open"'
    echo '    lv.graphics_type = "none"'
    echo '    lv.video_type = "none"'
    echo '  end'
    echo 'end'
} > "$VAGRANT_HOME/Vagrantfile"

phase "vagrant up --provider=libvirt ($accel)"
vm_created=1
up_start=$SECONDS
(cd "$repo" && vagrant up --provider=libvirt) 2>&1 | tee "$out/up.txt" | sed -u 's/^/  | /' \
    || die "vagrant up failed (results/vagrant/up.txt)"
up_s=$((SECONDS - up_start))

demo_cmd="cd /hpnlab && sudo make demo${dilation:+ DILATION=$dilation}"
phase "vagrant ssh -c \"$demo_cmd\""
demo_start=$SECONDS
demo=0   # pipefail: the pipeline's status is vagrant ssh's (tee and sed succeed)
(cd "$repo" && vagrant ssh -c "$demo_cmd") 2>&1 | tee "$out/demo.txt" | sed -u 's/^/  | /' || demo=$?
demo_s=$((SECONDS - demo_start))
(cd "$repo" && vagrant ssh -c "sudo tar -C /hpnlab/results -cf - demo") 2>/dev/null | tar -C "$out" -xf - \
    || phase "the demo's reports could not be copied out"
printf 'accel=%s\nup_s=%d\ndemo_s=%d\ndemo=%d\n' "$accel" "$up_s" "$demo_s" "$demo" > "$out/status"
phase "vagrant up took ${up_s}s, the demo ${demo_s}s (exit $demo); reports in results/vagrant/demo/"
[ "$demo" -eq 0 ] || die "make demo failed in the Vagrant VM (results/vagrant/demo.txt)"
phase "Vagrant path passed"
