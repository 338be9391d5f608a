// Command kerf-sandbox runs Kerf's local sandbox: a real one-node
// Kubernetes cluster on this machine (docs/design.md section 9; `up`,
// `down`, `status`, logic in internal/sandbox), and the demo on it (`demo`).
// A bare control plane (etcd and kube-apiserver) is test code:
// go run hack/controlplane-serve.go.
package main

import (
	"fmt"
	"os"
)

func usage() {
	fmt.Fprint(os.Stderr, `Usage: kerf-sandbox <command> [flags]

Commands:
  demo           up, install Kerf, run five real rollbacks (the last made by the recommender), narrate them; down on Ctrl-C
  up             start a real one-node cluster (or reuse the healthy one running)
  down           stop it and remove every trace of it
  status         show each component, the node and the kubeconfig

Exit codes: 0 ok, 1 failure, 2 usage.

Run 'kerf-sandbox <command> -h' for a command's flags.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "up":
		os.Exit(runUp(os.Args[2:]))
	case "demo":
		os.Exit(runDemo(os.Args[2:]))
	case "down":
		os.Exit(runDown(os.Args[2:]))
	case "status":
		os.Exit(runStatus(os.Args[2:]))
	case "-h", "-help", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "kerf-sandbox: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}
