#!/usr/bin/env bash
# Builds Kerf's binaries as static executables into the directory given
# (default bin/). `make build` and the Dockerfile both run this script, so
# the image holds exactly what a local build makes.
set -euo pipefail
out=${1:-bin}
shift || true
cmds=("$@")
[ ${#cmds[@]} -gt 0 ] || cmds=(kerf-agent kerf-leader kerf-sandbox)
mkdir -p "$out"
for c in "${cmds[@]}"; do
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$c" "./cmd/$c"
done
