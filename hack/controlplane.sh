#!/usr/bin/env bash
# Builds the real Kubernetes control plane and etcd from the Go module proxy
# and caches them under bin/, keyed by version. A second run does nothing.
#
#   hack/controlplane.sh            build what is missing
#   hack/controlplane.sh --check    exit 1 (and say what) if anything is missing
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# KUBERNETES_VERSION and ETCD_VERSION, written once for the script and for
# Go (package internal/kube embeds the same file).
# shellcheck source=../internal/kube/versions.env
. "$root/internal/kube/versions.env"
# Kubernetes binaries to build from k8s.io/kubernetes/cmd/<name>.
K8S_BINARIES=${K8S_BINARIES:-kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy}

kdir=$root/bin/k8s-$KUBERNETES_VERSION
edir=$root/bin/etcd-$ETCD_VERSION
work=$root/bin/.build

missing=()
for b in $K8S_BINARIES; do [ -x "$kdir/$b" ] || missing+=("$kdir/$b"); done
[ -x "$edir/etcd" ] || missing+=("$edir/etcd")

if [ "${1:-}" = "--check" ]; then
	if [ ${#missing[@]} -gt 0 ]; then
		echo "control plane binaries missing (run 'make deps'): ${missing[*]}" >&2
		exit 1
	fi
	exit 0
fi
if [ ${#missing[@]} -eq 0 ]; then
	echo "control plane: cached in bin/ (k8s $KUBERNETES_VERSION, etcd $ETCD_VERSION)"
	exit 0
fi

# progress reads `go build -v` (one line per package compiled) and prints a
# line every 100 packages, keeping the full log for errors.
progress() {
	local log=$1
	awk -v logf="$log" '{ print > logf; n++; if (n % 100 == 0) { printf "    ... %d packages\n", n; fflush() } }'
}

build() { # build <label> <log> <go build args...>
	local label=$1 log=$2
	shift 2
	local start=$SECONDS
	if ! go build -v "$@" 2>&1 | progress "$log"; then
		echo "build of $label failed; last lines of $log:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	# pipefail makes the pipeline fail when go build fails.
	echo "    $label built in $((SECONDS - start)) s"
}

mkdir -p "$work"

if [ ! -x "$edir/etcd" ]; then
	echo "etcd $ETCD_VERSION: building from the Go module proxy (about 1-2 min cold)"
	w=$work/etcd-$ETCD_VERSION
	mkdir -p "$w" "$edir"
	(
		cd "$w"
		[ -f go.mod ] || go mod init kerf.local/etcd-build >/dev/null 2>&1
		go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 ||
			go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		build etcd "$w/build.log" -o "$edir/etcd.tmp" go.etcd.io/etcd/server/v3
		mv "$edir/etcd.tmp" "$edir/etcd"
	)
fi

need_k8s=0
for b in $K8S_BINARIES; do [ -x "$kdir/$b" ] || need_k8s=1; done
if [ $need_k8s = 1 ]; then
	echo "kubernetes $KUBERNETES_VERSION: building $K8S_BINARIES from the Go module proxy"
	echo "    a cold build takes about 10 minutes on 2 cores; later runs reuse bin/ and Go's build cache"
	w=$work/k8s-$KUBERNETES_VERSION
	mkdir -p "$w" "$kdir"
	(
		cd "$w"
		if [ ! -f go.mod ]; then
			# k8s.io/kubernetes points its staging modules at ./staging/src;
			# a module that depends on it must replace each with its release.
			go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
			kmod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod
			staging="v0.${KUBERNETES_VERSION#v1.}"
			{
				echo "module kerf.local/k8s-build"
				echo
				echo "go 1.26"
				echo
				echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
				echo
				echo "replace ("
				sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*|\t\1 => \1 '"$staging"'|p' "$kmod"
				echo ")"
			} >go.mod.tmp
			mv go.mod.tmp go.mod
		fi
		pkgs=()
		for b in $K8S_BINARIES; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
		echo "    resolving modules"
		go get "${pkgs[@]}" >/dev/null 2>get.log || { cat get.log >&2; exit 1; }
		minor=${KUBERNETES_VERSION#v1.}
		minor=${minor%%.*}
		ldflags="-s -w"
		for kv in "gitVersion=$KUBERNETES_VERSION" gitMajor=1 "gitMinor=$minor" gitTreeState=clean; do
			ldflags="$ldflags -X k8s.io/component-base/version.$kv"
		done
		for b in $K8S_BINARIES; do
			[ -x "$kdir/$b" ] && continue
			echo "    building $b"
			build "$b" "$w/$b.log" -ldflags "$ldflags" -o "$kdir/$b.tmp" "k8s.io/kubernetes/cmd/$b"
			mv "$kdir/$b.tmp" "$kdir/$b"
		done
	)
fi
echo "control plane: ready in bin/ (k8s $KUBERNETES_VERSION, etcd $ETCD_VERSION)"
