package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/kube"
)

// repoPath is a path in the repository as docs and comments write it: a
// top folder of the module, then names; a trailing "*" is a glob.
var repoPath = regexp.MustCompile("(?:^|[\\s`(\"'])((?:cluster|node|internal|api|hub|web|cmd|test|bpf|cgroup|hack|manifests|charts|plugins|docs)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*])")

// otherRepositories are paths of other projects' repositories that Kerf's
// docs and comments name (cadvisor's main, which test/peers wires as it
// does).
var otherRepositories = []string{"cmd/cadvisor.go", "cmd/internal/"}

// histories are docs that tell how a part came to be, naming files since
// retired on purpose.
var histories = map[string]bool{"docs/vmnode.md": true}

// symbol is a Go name after a package path: cluster/cert.PatchCABundle.
var symbol = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_]*$`)

// TestDocsAndCommentsNameOnlyWhatExists: every repository path the docs
// and the Go comments name (cluster/rightsizing/watch.go, internal/kube)
// is a file or a folder of the repository, so a move or a rename leaves
// no stale name behind.
func TestDocsAndCommentsNameOnlyWhatExists(t *testing.T) {
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	texts := map[string][]string{} // where → the texts read there
	mds, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	mds = append(mds, filepath.Join(root, "README.md"))
	for _, md := range mds {
		b, err := os.ReadFile(md)
		require.NoError(t, err)
		texts[md] = []string{string(b)}
	}
	fset := token.NewFileSet()
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			texts[path] = append(texts[path], cg.Text())
		}
		return nil
	}))
	for where, ts := range texts {
		rel, _ := filepath.Rel(root, where)
		if histories[rel] {
			continue
		}
		for _, text := range ts {
			if rel == filepath.Join("docs", "development.md") {
				text = withoutLayout(text) // the layout test reads it
			}
			for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
				name := symbol.ReplaceAllString(strings.TrimRight(m[1], "."), "")
				if slices.ContainsFunc(otherRepositories, func(p string) bool { return strings.HasPrefix(name, p) }) {
					continue
				}
				if strings.Contains(name, "*") {
					got, err := filepath.Glob(filepath.Join(root, name))
					assert.NoError(t, err)
					assert.NotEmpty(t, got, "%s names %s: nothing matches it", rel, name)
					continue
				}
				_, err := os.Stat(filepath.Join(root, name))
				assert.NoError(t, err, "%s names %s, which does not exist", rel, name)
			}
		}
	}
}

// withoutLayout is docs/development.md without its Layout section, whose
// tree names folders by their last element.
func withoutLayout(md string) string {
	start := strings.Index(md, "\n## Layout\n")
	if start < 0 {
		return md
	}
	end := strings.Index(md[start+1:], "\n## ")
	if end < 0 {
		return md[:start]
	}
	return md[:start] + md[start+1+end:]
}
