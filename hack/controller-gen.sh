#!/usr/bin/env bash
# Regenerates the deepcopy functions of the CRD Go types
# (api/**/zz_generated.deepcopy.go) and the CRD manifests
# (manifests/crd/kerf.dev_*.yaml) with controller-gen, pinned as a go.mod
# tool directive and run through `go tool`. Run by `make generate`. The
# output depends only on the sources (no paths, no dates): a second run
# changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}

crds=$(mktemp -d)
trap 'rm -rf "$crds"' EXIT
"$GO" tool controller-gen \
	object paths=./api/... \
	crd:crdVersions=v1 output:crd:artifacts:config="$crds"
# Replace the CRDs as a whole, so the CRD of a renamed or removed type does
# not linger; manifests/crd/kustomization.yaml is written by hand.
mkdir -p manifests/crd
rm -f manifests/crd/kerf.dev_*.yaml
cp "$crds"/*.yaml manifests/crd/
# The Helm chart installs the same CRDs from its crds/ directory
# (test/helm checks they are the same).
rm -f charts/kerf/crds/kerf.dev_*.yaml
cp "$crds"/*.yaml charts/kerf/crds/
