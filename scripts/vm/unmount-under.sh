#!/usr/bin/env bash
# unmount-under.sh DIR: unmount everything mounted below DIR, deepest first
# (a loop device goes with its mount), then remove DIR. The image and box
# builders' cleanup, on success and on failure alike.
set -u
dir=${1:?usage: unmount-under.sh DIR}
for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || true
done
rm -rf --one-file-system "$dir"
