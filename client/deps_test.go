package client_test

import (
	"go/build"
	"strings"
	"testing"
)

// The client stays importable on its own: besides the standard library it imports only the
// module's leaf package of wire details, never the engine (and its JSON-Schema libraries) or the
// server.
func TestClientImportsNothingButTheStandardLibraryAndWire(t *testing.T) {
	allowed := map[string]bool{"github.com/foldstream/foldstream/internal/wire": true}
	seen := map[string]bool{}
	var walk func(path, dir string)
	walk = func(path, dir string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.Default.Import(path, dir, 0)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
				continue // the standard library
			}
			if !allowed[imp] {
				t.Errorf("%s imports %s", path, imp)
				continue
			}
			walk(imp, pkg.Dir)
		}
	}
	walk("github.com/foldstream/foldstream/client", ".")
	if !seen["github.com/foldstream/foldstream/internal/wire"] {
		t.Error("the walk never reached internal/wire: it read no imports")
	}
}
