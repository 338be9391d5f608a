//go:build ignore

// Builds Kerf's image archives (internal/images) into the directory given
// (default bin/images): `make images` runs it from the repository root.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kerf-dev/kerf/internal/images"
)

func main() {
	out := "bin/images"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	start := time.Now()
	archives, err := images.Build(context.Background(), images.Options{RepoRoot: root, OutDir: out, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log.Info("images ready", "archives", len(archives), "seconds", time.Since(start).Seconds())
}
