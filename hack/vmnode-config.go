//go:build ignore

// Writes the vmnode guest's certificates and configuration (see
// hack/vmnode.sh and docs/vmnode.md): go run hack/vmnode-config.go
// STATE_DIR NODE ROOT.
package main

import (
	"fmt"
	"os"

	"github.com/kerf-dev/kerf/internal/sandbox"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go run hack/vmnode-config.go STATE_DIR NODE ROOT")
		os.Exit(2)
	}
	if err := sandbox.WriteVMNodeFiles(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
