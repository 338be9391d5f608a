#!/usr/bin/env bash
# Experimental (issue 31 item 2, see docs/vmnode.md): builds a second
# sandbox node as a VM — Debian's 6.1 cloud kernel (bin/vm/vmlinuz, cgroup
# v2), a tiny busybox initramfs that loads the virtio modules and
# switch_roots to an ext4 disk image holding the host's containerd, runc,
# CNI plugins, the kubelet (bin/k8s-*), their shared libraries, the
# kernel's modules, the node's certificates and the image archives.
#
#   hack/vmnode.sh build STATE_DIR OUT_DIR   # certificates, disk, initramfs
#   hack/vmnode.sh net                       # tap device (run in the sandbox's netns)
#   hack/vmnode.sh run OUT_DIR               # boot (run in the sandbox's netns)
#
# STATE_DIR is a running sandbox's state directory (its pki/ca.key signs
# the node's certificates). The guest is on a tap device: guest 10.88.76.2,
# host 10.88.76.1, the guest's pods in 10.88.78.0/24 routed through it.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE=${VMNODE_NAME:-kerf-vm}
GUEST_IP=10.88.76.2 # sandbox.VMNodeIP (internal/sandbox/vmnode.go)
HOST_IP=10.88.76.1
TAP=${VMNODE_TAP:-kerfvm0}
POD_CIDR=10.88.78.0/24
KVER=$(sed 's/^linux-image-//' bin/vm/package)
K8S=$(ls -d bin/k8s-v* | head -1)

cmd=${1:-}
case "$cmd" in
build)
	STATE=$2
	OUT=$3
	mkdir -p "$OUT"
	rm -rf "$OUT/root" "$OUT/initrd.d"
	mkdir -p "$OUT/root" "$OUT/initrd.d"
	R=$OUT/root

	# The kernel's modules: the package's, unpacked (dpkg-deb, no hook).
	if [ ! -d "$OUT/kernel/lib/modules/$KVER" ]; then
		tmp=$(mktemp -d)
		(cd "$tmp" && apt-get download -qq "linux-image-$KVER" 2>/dev/null)
		dpkg-deb -x "$tmp"/*.deb "$OUT/kernel"
		rm -rf "$tmp"
		busybox depmod -b "$OUT/kernel" "$KVER"
	fi

	# Binaries and their shared libraries.
	mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,usr/lib/cni,lib64,etc/kerf,etc/cni/net.d,images,proc,sys,dev,run,tmp,var/lib,var/log,root}
	bins="/usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr /usr/sbin/runc"
	for b in $bins; do cp "$b" "$R$b"; done
	for p in bridge host-local loopback portmap; do cp /usr/lib/cni/$p "$R/usr/lib/cni/"; done
	cp "$K8S/kubelet" "$R/usr/local/bin/"
	extra=
	if [ "${VMNODE_PROXY:-0}" = 1 ]; then
		# kube-proxy (iptables mode) with Debian's iptables-nft and its
		# extensions, as the sandbox's own kube-proxy identity.
		cp "$K8S/kube-proxy" "$R/usr/local/bin/"
		cp "$STATE/kubeconfigs/kube-proxy.kubeconfig" "$R/etc/kerf/"
		cp /usr/sbin/xtables-nft-multi "$R/usr/sbin/"
		for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
			ln -sf xtables-nft-multi "$R/usr/sbin/$t"
		done
		mkdir -p "$R/usr/lib/x86_64-linux-gnu"
		cp -a /usr/lib/x86_64-linux-gnu/xtables "$R/usr/lib/x86_64-linux-gnu/"
		extra="/usr/sbin/xtables-nft-multi $(ls /usr/lib/x86_64-linux-gnu/xtables/*.so)"
	fi
	for b in $bins "$K8S/kubelet" /usr/lib/cni/bridge $extra; do
		ldd "$b" | awk '/=>/ {print $3}'
	done | cat - <(echo /lib64/ld-linux-x86-64.so.2) | sort -u | while read -r lib; do
		mkdir -p "$R$(dirname "$lib")"
		cp -L "$lib" "$R$lib"
	done
	cp /bin/busybox "$R/bin/busybox"
	ln -sf /bin/busybox "$R/sbin/modprobe" # the kernel's module loader
	mkdir -p "$R/lib/modules"
	cp -a "$OUT/kernel/lib/modules/$KVER" "$R/lib/modules/"
	cp bin/images/kerf-pause.tar "$R/images/"
	for img in ${VMNODE_IMAGES:-}; do cp "$img" "$R/images/"; done
	if [ "${VMNODE_DEBUG_SHELL:-0}" = 1 ]; then touch "$R/etc/kerf/debug-shell"; fi
	if [ "${VMNODE_PRELOAD:-0}" = 1 ]; then
		# Unpack the images on the host into the guest's containerd root
		# (content store, metadata, overlayfs snapshots are plain files):
		# a throwaway containerd of its own sockets, without CRI.
		C=$(realpath "$OUT")/preload
		RR=$(realpath "$R")
		rm -rf "$C"
		mkdir -p "$C" "$RR/var/lib/containerd"
		printf '%s\n' 'version = 2' "root = \"$RR/var/lib/containerd\"" "state = \"$C/state\"" \
			'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]' \
			'[grpc]' "  address = \"$C/ctd.sock\"" '[ttrpc]' "  address = \"$C/ctd.sock.ttrpc\"" \
			'[debug]' "  address = \"$C/debug.sock\"" >"$C/config.toml"
		containerd --config "$C/config.toml" >"$C/log" 2>&1 &
		ctd=$!
		for _ in $(seq 100); do ctr --address "$C/ctd.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
		for img in "$RR"/images/*.tar; do
			ctr -n k8s.io --address "$C/ctd.sock" images import "$img" >/dev/null
		done
		kill "$ctd"
		wait "$ctd" || true
		rm -f "$RR"/images/*.tar
		touch "$RR/etc/kerf/images-preloaded"
	fi

	# Certificates (the node's client one, system:node:NAME in system:nodes,
	# and its serving one, signed by the sandbox's CA) and the kubelet's,
	# containerd's and CNI's configuration: internal/sandbox/vmnode.go.
	go run hack/vmnode-config.go "$STATE" "$NODE" "$R"
	echo "127.0.0.1 localhost" >"$R/etc/hosts"
	echo "$GUEST_IP $NODE" >>"$R/etc/hosts"
	echo "nameserver $HOST_IP" >"$R/etc/resolv.conf"
	echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
	echo "root:x:0:" >"$R/etc/group"
	head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$R/etc/machine-id"
	printf 'PRETTY_NAME="Kerf vmnode (busybox, Debian %s kernel)"\nID=kerf-vmnode\n' "$KVER" >"$R/etc/os-release"
	cp hack/vmnode-init.sh "$R/sbin/init2"
	chmod 755 "$R/sbin/init2"
	cat >"$R/etc/kerf/env" <<EOF
NODE=$NODE
GUEST_IP=$GUEST_IP
HOST_IP=$HOST_IP
EOF

	# The disk: ext4 from the directory (mke2fs -d, no mount), sparse.
	rm -f "$OUT/disk.img"
	truncate -s "${VMNODE_DISK:-3G}" "$OUT/disk.img"
	mkfs.ext4 -q -F -L kerfvm -d "$R" "$OUT/disk.img"

	# The initramfs: busybox, the virtio modules, an init that mounts the disk.
	I=$OUT/initrd.d
	mkdir -p "$I"/{bin,proc,sys,dev,newroot,mods}
	cp /bin/busybox "$I/bin/"
	M=$OUT/kernel/lib/modules/$KVER/kernel
	for m in drivers/virtio/virtio.ko drivers/virtio/virtio_ring.ko drivers/virtio/virtio_pci_modern_dev.ko \
		drivers/virtio/virtio_pci_legacy_dev.ko drivers/virtio/virtio_pci.ko drivers/block/virtio_blk.ko \
		net/core/failover.ko drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
		cp "$M/$m" "$I/mods/"
	done
	cat >"$I/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk failover net_failover virtio_net; do
	insmod /mods/$m.ko || echo "insmod $m failed"
done
for i in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done
mount -t ext4 /dev/vda /newroot || { echo "cannot mount /dev/vda"; poweroff -f; }
echo "vmnode-mark root-mounted $(cut -d' ' -f1 /proc/uptime)"
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /sbin/init2
EOF
	chmod 755 "$I/init"
	(cd "$I" && find . | busybox cpio -o -H newc 2>/dev/null) >"$OUT/initrd.cpio"
	ls -la "$OUT/disk.img" "$OUT/initrd.cpio"
	du -sh "$R"
	;;
net)
	ip tuntap add dev "$TAP" mode tap 2>/dev/null || true
	ip addr replace "$HOST_IP/30" dev "$TAP"
	ip link set "$TAP" up
	ip route replace "$POD_CIDR" via "$GUEST_IP" dev "$TAP" onlink
	sysctl -qw net.ipv4.ip_forward=1
	;;
run)
	OUT=$2
	exec qemu-system-x86_64 -kernel bin/vm/vmlinuz -initrd "$OUT/initrd.cpio" \
		-append "console=ttyS0 quiet panic=-1 rdinit=/init" \
		-m "${VMNODE_MEM:-1024}" -smp 2 -cpu max -nographic -no-reboot -nodefaults -serial stdio \
		-drive file="$OUT/disk.img",format=raw,if=virtio,cache=unsafe \
		-netdev tap,id=n0,ifname="$TAP",script=no,downscript=no -device virtio-net-pci,netdev=n0,romfile=
	;;
*)
	echo "usage: $0 build STATE_DIR OUT_DIR | net | run OUT_DIR" >&2
	exit 2
	;;
esac
