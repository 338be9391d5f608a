#!/usr/bin/env bash
# Fetches the kernel the VM tests boot (test/vmtest): Debian bookworm's
# current 6.1 cloud kernel, the one linux-image-cloud-amd64 depends on
# (cgroup v2 with every controller, BTF, no lockdown), unpacked into
# bin/vm/ with dpkg-deb: nothing is installed and no hook runs. Its modules
# go to bin/vm/modules/lib/modules/ (the sandbox's VM node loads virtio,
# overlay, bridge and netfilter from there; `busybox depmod` indexes them).
# A second run with the kernel and modules in place does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=bin/vm
if [ -s "$dir/vmlinuz" ] && [ -s "$dir/package" ] && [ -s "$dir/modules/lib/modules/$(sed 's/^linux-image-//' "$dir/package")/modules.dep" ]; then
	echo "vm kernel: $(cat "$dir/package")"
	exit 0
fi
kernel_package() {
	apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}
pkg=$(kernel_package)
if [ -z "$pkg" ]; then
	apt-get update -qq
	pkg=$(kernel_package)
fi
if [ -z "$pkg" ]; then
	echo "vm kernel: apt knows no linux-image-cloud-amd64 (is Debian bookworm's main in the sources?)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq "$pkg" 2>/dev/null)
dpkg-deb -x "$tmp"/*.deb "$tmp/root"
mkdir -p "$dir"
cp "$tmp"/root/boot/vmlinuz-* "$dir/vmlinuz.tmp"
mv "$dir/vmlinuz.tmp" "$dir/vmlinuz"
kver=${pkg#linux-image-}
rm -rf "$dir/modules"
mkdir -p "$dir/modules/lib/modules"
cp -a "$tmp/root/lib/modules/$kver" "$dir/modules/lib/modules/"
busybox depmod -b "$dir/modules" "$kver"
echo "$pkg" > "$dir/package"
echo "vm kernel: $pkg"
