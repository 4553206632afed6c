#!/usr/bin/env bash
# Build (or reuse) the VM tier's disk image: Debian 12 with its stock kernel,
# provisioned by scripts/provision.sh exactly as a Vagrant VM is.
#
#   build-image.sh            print the directory holding rootfs.img, vmlinuz
#                             and initrd.img, building it first when needed
#
# The image is cached under $HPNLAB_VM_CACHE (/var/cache/hpnlab/vm), outside
# the clone, keyed by a hash of everything that decides its contents: this
# script, provision.sh, the VM's boot stub and the project's dependencies
# (pyproject.toml, constraints.txt). The project itself is not in the image: the VM
# mounts the clone at /hpnlab and the image's venv has it installed editable
# from there, so a code change needs no rebuild.
#
# Everything is fetched on the host while building: the VM has no network.
# Debian packages by debootstrap, Python packages by the host's own pip (and
# its configuration) into a wheelhouse that pip in the chroot installs from.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HPNLAB_VM_CACHE:-/var/cache/hpnlab/vm}
suite=bookworm
size=6G   # sparse: the provisioned tree is ~2.5 GB, the rest is room for logs and captures
t0=$SECONDS
phase() { printf '[vm-image +%ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { printf 'build-image.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot)"

key=$(cat "$0" "$here/stub-init" "$here/unmount-under.sh" "$repo/scripts/provision.sh" "$repo/pyproject.toml" \
          "$repo/constraints.txt" | sha256sum | cut -c1-16)
image=$cache/debian12-$key
if [ -f "$image/rootfs.img" ]; then
    phase "cached image $image"
    echo "$image"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9   # one build at a time; a build that waited finds the image done
if [ -f "$image/rootfs.img" ]; then
    echo "$image"
    exit 0
fi

# Host tools: a CI machine starts with none of them.
need=()
for p in debootstrap qemu-system-x86 qemu-utils e2fsprogs python3-pip; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    phase "installing host tools: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; } >"$log" 2>&1 \
        || { tail -20 "$log" >&2; rm -f "$log"; die "installing ${need[*]} failed (log above)"; }
    rm -f "$log"
fi

work=$(mktemp -d "$cache/build.XXXXXX")
root=$work/root
mounts=()
# every mount under the build tree (ours, or debootstrap's if it failed), then the tree
trap 'bash "$here/unmount-under.sh" "$work"' EXIT
bind() {  # mount only what provisioning needs (the EXIT trap unmounts it)
    mkdir -p "$root$2"
    mount "${@:3}" "$1" "$root$2"
    mounts+=("$root$2")
}

mapfile -t pkgs < <(bash "$repo/scripts/provision.sh" --packages)
# linux-image-amd64: the stock kernel the VM boots; make runs `make demo`;
# ca-certificates so that pip and others find a bundle where they expect it.
include=$(IFS=,; echo "linux-image-amd64,make,ca-certificates,${pkgs[*]}")
phase "debootstrap $suite (minbase + $include)"
debootstrap --variant=minbase --include="$include" "$suite" "$root" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }

phase "fetching Python packages on the host (its pip configuration)"
wheels=$work/wheels
# The same Python (3.11, Debian's) as the image, so the wheels fit it.
/usr/bin/python3 -m pip download -q -d "$wheels" -c "$repo/constraints.txt" pip setuptools wheel "$repo[dev]" \
    >"$work/pip.log" 2>&1 || { tail -20 "$work/pip.log" >&2; die "pip download failed (log above)"; }

phase "provisioning in a chroot (scripts/provision.sh, image mode)"
mkdir -p "$root/hpnlab" "$root/tmp/wheels" "$root/etc/ssl/certs"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
install -m 0755 "$here/stub-init" "$root/sbin/hpnlab-init"
echo hpnlab > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 hpnlab\n' > "$root/etc/hosts"   # ovs-ctl resolves it
bind proc /proc -t proc
bind sysfs /sys -t sysfs
bind /dev /dev --bind
# A copy of the clone where the VM will mount it: the editable install
# points there (and pip writes its build metadata into the copy, not the
# clone). The copy is removed again below; only the mount point stays.
tar -C "$repo" --exclude=./.git --exclude=./.venv --exclude=./results -cf - . \
    | tar -C "$root/hpnlab" -xf -
bind "$wheels" /tmp/wheels --bind -o ro
# A clean environment: the host's pip settings name its own paths.
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive HPNLAB_PROVISION=image HPNLAB_VENV=/opt/hpnlab/venv \
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    bash /hpnlab/scripts/provision.sh >"$work/provision.log" 2>&1 \
    || { tail -30 "$work/provision.log" >&2; die "provisioning the image failed (log above)"; }
grep '^\[provision\]' "$work/provision.log" >&2
for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}"; done
mounts=()
rm -rf "$root/hpnlab" "$root/tmp/wheels" "$root/var/cache/apt/archives/"*.deb "$root/root/.cache"
mkdir "$root/hpnlab"

phase "writing the disk image"
mkdir -p "$work/out"
cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)" "$work/out/vmlinuz"
cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)" "$work/out/initrd.img"
mkfs.ext4 -q -L hpnlab -d "$root" "$work/out/rootfs.img" "$size" >&2
rm -rf "$image"
mv "$work/out" "$image"
# Older images (other keys) are of no further use.
for old in "$cache"/debian12-*; do
    [ "$old" = "$image" ] || rm -rf --one-file-system "$old"
done
phase "image ready: $image ($(du -sh --apparent-size "$image/rootfs.img" | cut -f1) sparse, $(du -sh "$image/rootfs.img" | cut -f1) used)"
echo "$image"
