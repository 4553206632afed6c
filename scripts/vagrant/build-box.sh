#!/usr/bin/env bash
# Build (or reuse) a Vagrant box for the libvirt provider from the VM tier's
# disk image (scripts/vm/build-image.sh: Debian 12, stock kernel, provisioned
# by scripts/provision.sh), so that `make test-vagrant` boots the Vagrantfile
# without downloading a box.
#
#   build-box.sh     print the path of the .box file, building it first when needed
#
# What a box has that the VM tier's image lacks: systemd as init, sshd, sudo
# and rsync (from Debian, installed in a chroot on a copy of the image), DHCP
# on the first NIC, and the user `vagrant` with Vagrant's well-known key and
# password-less sudo, as every public Vagrant box. The image's virtualenv is
# moved to /hpnlab/.venv, where the Vagrantfile's provisioning
# (scripts/provision.sh in the synced folder) looks for it: its rsync leaves
# .venv/ alone, so provisioning finds everything installed and needs no
# package index. The image has no boot loader: the box's own Vagrantfile
# boots the kernel and initrd it carries beside the disk (libvirt's direct
# kernel boot).
#
# Cached under $HPNLAB_VAGRANT_CACHE (/var/cache/hpnlab/vagrant), keyed by
# the image it came from and this script with the box's Vagrantfile.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HPNLAB_VAGRANT_CACHE:-/var/cache/hpnlab/vagrant}
t0=$SECONDS
phase() { printf '[vagrant-box +%ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { printf 'build-box.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (loop mount and chroot)"

image=$(bash "$repo/scripts/vm/build-image.sh") || die "building the VM tier's image failed"
key=$( { cat "$0" "$here/box.Vagrantfile"; basename "$image"; } | sha256sum | cut -c1-16)
box=$cache/hpnlab-debian12-$key.box
if [ -f "$box" ]; then
    phase "cached box $box"
    echo "$box"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9   # one build at a time
if [ -f "$box" ]; then
    echo "$box"
    exit 0
fi
for tool in qemu-img chroot mount; do
    command -v "$tool" >/dev/null || die "$tool is missing (scripts/vagrant/run.sh installs the host tools)"
done
pubkey=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | sort -V | tail -1)
[ -n "$pubkey" ] || die "Vagrant's public key (keys/vagrant.pub of Debian's vagrant package) not found"

work=$(mktemp -d "$cache/build.XXXXXX")
root=$work/root
trap 'bash "$repo/scripts/vm/unmount-under.sh" "$work"' EXIT   # every mount below it, then the tree

phase "copying the VM tier's image ($image)"
cp --sparse=always "$image/rootfs.img" "$work/rootfs.img"
mkdir -p "$root"
mount -o loop "$work/rootfs.img" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"

phase "installing systemd, sshd, sudo and rsync in a chroot (Debian's packages)"
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
cp /etc/resolv.conf "$root/etc/resolv.conf"
{ in_root apt-get update -q && in_root apt-get install -y -q --no-install-recommends \
    systemd-sysv openssh-server sudo rsync; } > "$work/apt.log" 2>&1 \
    || { tail -20 "$work/apt.log" >&2; die "installing the box's packages failed (log above)"; }
in_root apt-get clean

phase "the vagrant user, DHCP, and the virtualenv where provisioning looks"
in_root useradd --create-home --shell /bin/bash vagrant
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$pubkey" "$root/home/vagrant/.ssh/authorized_keys"
[ "$(in_root id -u vagrant)" = 1000 ] || die "the vagrant user did not get uid 1000"
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n' > "$root/etc/systemd/network/50-dhcp.network"
in_root systemctl enable systemd-networkd.service ssh.service >/dev/null 2>&1
mv "$root/opt/hpnlab/venv" "$root/hpnlab/.venv"
rmdir "$root/opt/hpnlab" 2>/dev/null || true
# A virtualenv names its own path in its scripts; point them at the new one.
grep -rlI --null '/opt/hpnlab/venv' "$root/hpnlab/.venv/bin" "$root/hpnlab/.venv/pyvenv.cfg" \
    | xargs -0 -r sed -i 's|/opt/hpnlab/venv|/hpnlab/.venv|g'
if grep -rqI '/opt/hpnlab/venv' "$root/hpnlab/.venv/bin" "$root/hpnlab/.venv/pyvenv.cfg"; then
    die "the virtualenv still names /opt/hpnlab/venv after the move"
fi
rm -f "$root/usr/local/bin/hpnlab"   # provisioning links the moved virtualenv's
rm -f "$root/etc/resolv.conf"

cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)" "$work/vmlinuz"
cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)" "$work/initrd.img"
for m in $(awk -v w="$root" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do umount "$m"; done

phase "writing the box (qcow2 disk, kernel, initrd, metadata)"
mkdir "$work/box"
qemu-img convert -O qcow2 "$work/rootfs.img" "$work/box/box.img"
mv "$work/vmlinuz" "$work/initrd.img" "$work/box/"
cp "$here/box.Vagrantfile" "$work/box/Vagrantfile"
size_gb=$(( ($(stat -c %s "$work/rootfs.img") + (1 << 30) - 1) >> 30 ))
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$size_gb" > "$work/box/metadata.json"
tar -C "$work/box" -cf "$work/box.tar" metadata.json Vagrantfile box.img vmlinuz initrd.img
for old in "$cache"/hpnlab-debian12-*.box; do
    [ -e "$old" ] && rm -f "$old"   # boxes of older images are of no further use
done
mv "$work/box.tar" "$box"
phase "box ready: $box ($(du -sh "$box" | cut -f1))"
echo "$box"
