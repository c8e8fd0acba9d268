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

// kernelOrder is the kernel's files from the top down (docs/store.md#the-kernel-and-its-layers):
// opening and closing the store; the writer and its group commit; applying a committed group; the
// insert path and the hooks it asks; the write transaction; holds; the driver's transaction begun
// on demand; other processes' commits; the caches; reads; the vocabulary at the bottom. A file
// calls the files below it; a call from a file to one above it goes back up, and the kernel keeps
// those few (maxKernelBackCalls).
var kernelOrder = []string{
	"store.go", "inspect.go", "writer.go", "health.go", "commitapply.go", "record.go", "hooks.go",
	"writetx.go", "hold.go", "lazytx_events.go", "lazytx_subscriptions.go", "lazytx.go",
	"remotewrites.go", "tailcache.go", "streamcache.go", "read.go", "stats.go", "watch.go", "storage.go",
}

// maxKernelBackCalls bounds the file pairs of the kernel whose calls go back up kernelOrder.
const maxKernelBackCalls = 20

// kernelBackCalls prints the kernel's file-to-file calls — distinct (caller file, callee file)
// pairs where a function or method declared in the kernel is called from another of its files,
// resolved by type-checking its non-test files — and those that go back up kernelOrder. It
// returns how many rules they break: a kernel file missing from kernelOrder, or more back calls
// than maxKernelBackCalls.
func kernelBackCalls(p pkg) (bad int) {
	rank := map[string]int{}
	for i, f := range kernelOrder {
		rank[f] = i
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, f := range p.GoFiles {
		if _, ok := rank[f]; !ok {
			fmt.Fprintf(os.Stderr, "layout: the kernel's file %s has no place in kernelOrder (internal/harness/layout/kernelcalls.go): put it where its calls go down\n", f)
			bad++
		}
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
		if err != nil {
			fail("%v", err)
		}
		files = append(files, file)
	}
	if bad > 0 {
		return bad
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	tp, err := conf.Check(p.ImportPath, fset, files, info)
	if err != nil {
		fail("type-check %s: %v", p.ImportPath, err)
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
			if fn, ok := info.Uses[id].(*types.Func); ok && fn.Pkg() == tp {
				if to := filepath.Base(fset.Position(fn.Pos()).Filename); to != from {
					pairs[[2]string{from, to}] = true
				}
			}
			return true
		})
	}
	var back []string
	for pr := range pairs {
		if rank[pr[0]] > rank[pr[1]] {
			back = append(back, pr[0]+" → "+pr[1])
		}
	}
	sort.Strings(back)
	fmt.Printf("stream kernel file-to-file calls: %d file pairs, %d back up its order (%s)\n",
		len(pairs), len(back), strings.Join(back, ", "))
	if len(back) > maxKernelBackCalls {
		fmt.Fprintf(os.Stderr, "layout: %d of the kernel's file pairs call back up its order, over %d: move the callee down, or the caller up\n",
			len(back), maxKernelBackCalls)
		bad++
	}
	return bad
}
