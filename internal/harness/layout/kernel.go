package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// kernelFiles are the files of package stream that form its kernel
// (docs/store.md#the-kernel-and-its-layers); every other file of the package is a layer on it.
var kernelFiles = map[string]bool{
	"store.go": true, "writer.go": true, "writetx.go": true, "commitapply.go": true,
	"lazytx.go": true, "hooks.go": true, "hold.go": true, "record.go": true,
	"streamcache.go": true, "tailcache.go": true, "remotewrites.go": true,
	"read.go": true, "watch.go": true, "errors.go": true,
	"eventcodec.go": true, "storage.go": true, "health.go": true, "stats.go": true,
	"testhooks.go": true,
}

// kernelUp is the one call the kernel makes up to a layer: opening a store sets its layers up.
const kernelUp = "store.go → layers.go"

// kernelFigures prints the stream kernel's figures: its lines and the layers', the largest file,
// and the file-to-file calls inside the package — distinct (caller file, callee file) pairs where
// a function or method declared in the package is called from another file — with those that go
// from a kernel file up to a layer file listed. Calls are resolved by type-checking the package's
// non-test files. It returns how many calls go up other than kernelUp: a layer reaches the kernel
// through its hooks, never the other way round.
func kernelFigures(dir string, goFiles []string) (bad int) {
	fset := token.NewFileSet()
	var files []*ast.File
	kernelLines, layerLines, largest, largestName := 0, 0, 0, ""
	for _, f := range goFiles {
		path := filepath.Join(dir, f)
		src, err := os.ReadFile(path)
		if err != nil {
			fail("%v", err)
		}
		n := strings.Count(string(src), "\n")
		if kernelFiles[f] {
			kernelLines += n
		} else {
			layerLines += n
		}
		if n > largest {
			largest, largestName = n, f
		}
		file, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			fail("%v", err)
		}
		files = append(files, file)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	p, err := conf.Check("stream", fset, files, info)
	if err != nil {
		fail("type-check stream: %v", err)
	}
	pairs := map[[2]string]bool{}
	for _, file := range files {
		from := filepath.Base(fset.Position(file.Pos()).Filename)
		ast.Inspect(file, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var id *ast.Ident
			switch fn := ast.Unparen(c.Fun).(type) {
			case *ast.Ident:
				id = fn
			case *ast.SelectorExpr:
				id = fn.Sel
			case *ast.IndexExpr:
				if x, ok := fn.X.(*ast.Ident); ok {
					id = x
				}
			}
			if id == nil {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok || fn.Pkg() != p {
				return true
			}
			if to := filepath.Base(fset.Position(fn.Pos()).Filename); to != from {
				pairs[[2]string{from, to}] = true
			}
			return true
		})
	}
	var up []string
	for pr := range pairs {
		if kernelFiles[pr[0]] && !kernelFiles[pr[1]] {
			up = append(up, pr[0]+" → "+pr[1])
		}
	}
	sort.Strings(up)
	fmt.Printf("stream kernel: %d non-test lines, its layers %d; largest file %s (%d lines)\n",
		kernelLines, layerLines, largestName, largest)
	fmt.Printf("stream file-to-file calls: %d file pairs, %d from the kernel up to a layer (%s)\n",
		len(pairs), len(up), strings.Join(up, ", "))
	for _, u := range up {
		if u != kernelUp {
			fmt.Fprintf(os.Stderr, "layout: the stream kernel calls up to a layer (%s): register a hook instead (docs/store.md#the-kernel-and-its-layers)\n", u)
			bad++
		}
	}
	return bad
}
