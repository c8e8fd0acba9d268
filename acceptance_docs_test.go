package foldstream_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryAcceptanceCaseIsListedInEngineDocs holds docs/engine.md#acceptance-cases and the tests to
// each other: every acceptance id a test names in a comment (P-nn, R-nn, S-nn) has its bullet in the
// list, and every listed id is named by some test.
func TestEveryAcceptanceCaseIsListedInEngineDocs(t *testing.T) {
	doc, err := os.ReadFile("docs/engine.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^- \*\*([PRS]-\d{2})\*\*`).FindAllSubmatch(doc, -1) {
		listed[string(m[1])] = true
	}
	if len(listed) == 0 {
		t.Fatal("docs/engine.md lists no acceptance case")
	}
	id := regexp.MustCompile(`\b[PRS]-\d{2}\b`)
	named := map[string][]string{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (path == "e2e" || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || path == "acceptance_docs_test.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range id.FindAll(src, -1) {
			named[string(m)] = append(named[string(m)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for c, files := range named {
		if !listed[c] {
			t.Errorf("%s is named in %s but not listed in docs/engine.md#acceptance-cases", c, slices.Compact(files))
		}
	}
	for c := range listed {
		if named[c] == nil {
			t.Errorf("%s is listed in docs/engine.md#acceptance-cases but no test names it", c)
		}
	}
	if old := regexp.MustCompile(`(?m)^func Test[PRS]\d{2}`).FindString(string(doc)); old != "" {
		t.Errorf("docs/engine.md quotes a test by its id: %q", old)
	}
}
