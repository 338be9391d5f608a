package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/kube"
)

// maxFirstSentence is the most words a doc comment's first sentence may
// run to.
const maxFirstSentence = 25

// shortLeadTree is the tree whose packages are held to
// maxFirstSentence: the leader's, every package of it.
const shortLeadTree = "cluster"

// TestDocCommentsLeadWithAShortSentence: in shortLeadTree, every doc
// comment's first sentence runs to at most 25 words. That sentence says
// what the thing is or does. The why follows in short sentences or a
// list, and figures live in docs/, which the comment links. Leading
// sentences with the why and the figures packed in made the leader's
// comments hard to skim.
func TestDocCommentsLeadWithAShortSentence(t *testing.T) {
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	fset := token.NewFileSet()
	var dirs []string
	require.NoError(t, filepath.WalkDir(filepath.Join(root, shortLeadTree), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() != "testdata" {
			dirs = append(dirs, path)
		}
		return err
	}))
	assert.Greater(t, len(dirs), 10, "the packages under %s", shortLeadTree)
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			require.NoError(t, err)
			rel, err := filepath.Rel(root, path)
			require.NoError(t, err)
			for _, d := range docComments(f) {
				first := firstSentence(d.doc.Text())
				assert.LessOrEqual(t, len(first), maxFirstSentence, "%s:%d: the doc of %s leads with a sentence of %d words: %q",
					rel, fset.Position(d.doc.Pos()).Line, d.name, len(first), strings.Join(first, " "))
			}
		}
	}
}

// docComment is a doc comment and the name it documents.
type docComment struct {
	name string
	doc  *ast.CommentGroup
}

// docComments are f's doc comments: the package's, each func's, each
// declaration's and, in a group, each type's, var's and const's.
func docComments(f *ast.File) []docComment {
	out := []docComment{{"package " + f.Name.Name, f.Doc}}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			out = append(out, docComment{"func " + d.Name.Name, d.Doc})
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				continue
			}
			for i, spec := range d.Specs {
				name := d.Tok.String() + " " + specName(spec)
				if i == 0 && d.Lparen.IsValid() {
					out = append(out, docComment{"the group of " + name, d.Doc})
				} else if i == 0 {
					out = append(out, docComment{name, d.Doc})
				}
				out = append(out, docComment{name, specDoc(spec)})
			}
		}
	}
	kept := out[:0]
	for _, d := range out {
		if d.doc != nil {
			kept = append(kept, d)
		}
	}
	return kept
}

// specName is the first name a type, var or const spec declares.
func specName(spec ast.Spec) string {
	if s, ok := spec.(*ast.TypeSpec); ok {
		return s.Name.Name
	}
	return spec.(*ast.ValueSpec).Names[0].Name
}

// specDoc is the doc comment of a spec in a parenthesized group.
func specDoc(spec ast.Spec) *ast.CommentGroup {
	if s, ok := spec.(*ast.TypeSpec); ok {
		return s.Doc
	}
	return spec.(*ast.ValueSpec).Doc
}

// firstSentence is the words of text up to the first that ends with a
// period, as ". " or a closing "." ends a sentence; "e.g." and "i.e."
// end none.
func firstSentence(text string) []string {
	words := strings.Fields(text)
	for i, w := range words {
		if strings.HasSuffix(w, ".") && !strings.HasSuffix(w, "e.g.") && !strings.HasSuffix(w, "i.e.") {
			return words[:i+1]
		}
	}
	return words
}
