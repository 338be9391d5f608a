#!/bin/busybox sh
# The VM node's init after the initramfs switched to its disk
# (internal/sandbox/vmdisk.go): mounts, cgroup v2, network, containerd and
# the kubelet. The images are on the disk already. Each step prints
# "vmnode-mark STEP UPTIME" on the console (logs/vm.log on the host).
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin HOME=/root
mark() { echo "vmnode-mark $1 $(cut -d' ' -f1 /proc/uptime)"; }
. /etc/kerf/env
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -o remount,rw /
mount --make-rshared /
hostname "$NODE"
mark mounted
# Up's test of a guest that panics (KERF_VM_PANIC_ONCE=1): once only, the
# marker's removal on the disk before the crash.
if [ -e /etc/kerf/panic-once ]; then
	rm /etc/kerf/panic-once
	sync
	mark panic-once
	echo c >/proc/sysrq-trigger
fi
echo "kernel $(uname -r), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

for m in overlay bridge br_netfilter veth nf_conntrack iptable_filter iptable_nat nft_compat xt_comment xt_mark xt_conntrack xt_addrtype xt_MASQUERADE xt_nat xt_multiport xt_statistic; do
	modprobe $m 2>/dev/null || echo "modprobe $m failed"
done
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1
ip link set lo up
ip addr add "$GUEST_IP/$LINK_PREFIX" dev eth0
ip link set eth0 up
ip route add default via "$HOST_IP"
mark network
# A root shell without authentication, for looking around: only when Up
# ran with KERF_VM_DEBUG_SHELL=1 (whoever reaches the tap gets root in the
# guest).
if [ -e /etc/kerf/debug-shell ]; then
	telnetd -p 2323 -l /bin/sh -b "$GUEST_IP"
fi

# The kubelet wants its controllers enabled down the tree.
echo "+cpu +cpuset +memory +pids +io +hugetlb" >/sys/fs/cgroup/cgroup.subtree_control

mkdir -p /var/log
containerd --config /etc/kerf/containerd.toml >/var/log/containerd.log 2>&1 &
until ctr version >/dev/null 2>&1; do sleep 0.2; done
mark containerd-serving
# shellcheck disable=SC2086 # KUBELET_ARGS is a list of flags
kubelet $KUBELET_ARGS >/var/log/kubelet.log 2>&1 &
mark kubelet-started
until grep -q 'Successfully registered node' /var/log/kubelet.log; do
	if ! kill -0 $! 2>/dev/null; then
		echo "the kubelet exited; the end of its log:"
		tail -n 30 /var/log/kubelet.log
		break
	fi
	sleep 0.2
done
mark node-registered
while true; do sleep 3600; done
