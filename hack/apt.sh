#!/usr/bin/env bash
# Installs the Debian packages Kerf's build and tests need, once.
# A second run only checks (dpkg-query) and does nothing.
set -euo pipefail

# clang/llvm/libbpf-dev/bpftool: make generate (BPF objects, vmlinux.h).
# postgresql-15: the hub's store tests and benchmarks run a real PostgreSQL (test/pgtest).
# prometheus: the PromQL tests run a real Prometheus.
# chromium: the web pages' browser tests (chromedp, headless).
# fonts-liberation: text for its screenshots (a recommendation of chromium, which apt.sh does not install).
# protobuf-compiler: make generate (api/stream/v1).
# iproute2, util-linux, procps: the kernel tests (cgroups, processes).
# containerd, runc, containernetworking-plugins, iptables, conntrack: the
# one-node sandbox cluster (kerf-sandbox) and the end-to-end tests.
# qemu-system-x86, busybox-static: the VM the kernel tests run in again on
# cgroup v2 (test/vmtest; its kernel comes from hack/vmkernel.sh), and the
# sandbox's VM node; e2fsprogs: mkfs.ext4 -d writes that node's disk.
PACKAGES=(clang llvm libbpf-dev bpftool protobuf-compiler prometheus iproute2 util-linux procps git make containerd runc containernetworking-plugins iptables conntrack ethtool socat postgresql-15 chromium fonts-liberation qemu-system-x86 busybox-static e2fsprogs)

missing=()
for p in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "apt packages: installed"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "apt packages missing: ${missing[*]}; run 'make deps' as root (or install them)" >&2
	exit 1
fi
echo "apt packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "apt packages: installed"
