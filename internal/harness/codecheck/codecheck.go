// Package codecheck reads the error-code constants of a Go source file, for the tests that hold
// the client's codes to the catalogue in foldtype/errors.go (docs/client.md#streams).
package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PackageConsts returns the constants of type Code declared in the package in dir (its non-test
// Go files), by name, with their string values.
func PackageConsts(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		cs, err := Consts(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		for k, v := range cs {
			out[k] = v
		}
	}
	return out, nil
}

// Consts returns the constants of type Code declared in the Go file at path, by name, with their
// string values.
func Consts(path string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" || len(vs.Values) != len(vs.Names) {
				continue
			}
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
				}
				out[n.Name] = v
			}
		}
	}
	return out, nil
}
