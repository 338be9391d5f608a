#!/usr/bin/env bash
# Builds Kerf's binaries as static executables into the directory given
# (default bin/). `make build` and the Dockerfile both run this script, so
# the image holds exactly what a local build makes.
#
# grpcnotrace leaves out golang.org/x/net/trace, which no Kerf binary
# serves: with it goes text/template, whose reflection on methods keeps the
# linker from dropping unused methods; the agent shrinks from 24.9 to
# 20.6 MB, and its resident binary pages with it. KERF_BUILD_TAGS adds
# tags (comma-separated), e.g. kerfpprof for the agent's budget profile.
set -euo pipefail
out=${1:-bin}
shift || true
cmds=("$@")
[ ${#cmds[@]} -gt 0 ] || cmds=(kerf-agent kerf-leader kerf-sandbox)
mkdir -p "$out"
for c in "${cmds[@]}"; do
	CGO_ENABLED=0 go build -trimpath -tags "grpcnotrace${KERF_BUILD_TAGS:+,$KERF_BUILD_TAGS}" \
		-ldflags "-s -w" -o "$out/$c" "./cmd/$c"
done
