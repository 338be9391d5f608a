#!/usr/bin/env bash
# Regenerates the deepcopy functions of the CRD Go types
# (api/**/zz_generated.deepcopy.go) and the CRD manifests
# (manifests/crd/kerf.dev_*.yaml) with controller-gen, pinned and built
# through the Go module proxy. Run by `make generate`. The output depends
# only on the sources (no paths, no dates): a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLLER_GEN_VERSION=${CONTROLLER_GEN_VERSION:-v0.23.0}
GO=${GO:-go}

crds=$(mktemp -d)
trap 'rm -rf "$crds"' EXIT
"$GO" run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_GEN_VERSION}" \
	object paths=./api/... \
	crd:crdVersions=v1 output:crd:artifacts:config="$crds"
# Replace the CRDs as a whole, so the CRD of a renamed or removed type does
# not linger; manifests/crd/kustomization.yaml is written by hand.
mkdir -p manifests/crd
rm -f manifests/crd/kerf.dev_*.yaml
cp "$crds"/*.yaml manifests/crd/
