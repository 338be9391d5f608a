// Package layout checks that docs/development.md's package tree is the
// code's: every package is in it, and no package imports one above it.
package layout

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/kube"
)

const module = "github.com/kerf-dev/kerf/"

// treeLine is one line of the tree: two spaces of indent per level, the
// folder name with a trailing slash.
var treeLine = regexp.MustCompile(`^((?:  )*)([a-z0-9][a-z0-9./-]*)/(?:\s|$)`)

// tree reads the package tree of docs/development.md, in its order.
func tree(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "development.md"))
	require.NoError(t, err)
	defer f.Close()
	var out, path []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Layout":
			in = true
		case !in:
		case strings.HasPrefix(line, "```") && len(path) > 0:
			return out
		default:
			m := treeLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			depth := len(m[1]) / 2
			require.LessOrEqual(t, depth, len(path), "line %q is indented past its parent", line)
			path = append(path[:depth], m[2])
			out = append(out, strings.Join(path, "/"))
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out, "docs/development.md has no package tree under ## Layout")
	return out
}

type pkg struct {
	ImportPath string
	Imports    []string
	Name       string
}

// packages lists the module's packages with their imports.
func packages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Name", "./...")
	cmd.Dir = root
	outb, err := cmd.Output()
	require.NoError(t, err)
	var out []pkg
	dec := json.NewDecoder(strings.NewReader(string(outb)))
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		out = append(out, p)
	}
	return out
}

// TestEveryPackageIsInTheTreeAndImportsOnlyBelowIt: a package's imports of
// this module are all listed after it in the tree, except that nothing but
// tests imports test/ (a test/ package may import what is below it too).
func TestEveryPackageIsInTheTreeAndImportsOnlyBelowIt(t *testing.T) {
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	order := tree(t, root)
	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	for _, p := range packages(t, root) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if rel == "api" {
			continue // api/ holds only the doc of its children
		}
		i, ok := pos[rel]
		if !assert.True(t, ok, "package %s is not in docs/development.md's tree", rel) {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			j, ok := pos[dep]
			if !assert.True(t, ok, "%s imports %s, which is not in the tree", rel, dep) {
				continue
			}
			assert.Greater(t, j, i, "%s imports %s, which stands above it in the tree", rel, dep)
			if strings.HasPrefix(dep, "test/") {
				assert.True(t, strings.HasPrefix(rel, "test/"), "%s (not a test package) imports %s", rel, dep)
			}
		}
	}
}
