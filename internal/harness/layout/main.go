// Command layout prints the module's shape, the figures README.md#layout states: per package its
// non-test lines, its exported names and the module packages it imports, with the floor each
// package stands on; then the exported methods of stream.Store and the time.Sleep calls in tests.
// It exits non-zero when an import goes from a lower floor to a higher one (or to a package with
// no floor), so a new arrow the wrong way round is caught where the floors are written down.
//
//	go run ./internal/harness/layout          # from the module root
//
// Exported names count every exported package-level const, var, type and func, and every exported
// method of an exported type (methods reached only through an embedded field are not counted).
// Lines are all lines of the non-test .go files, comments included.
package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const module = "github.com/foldstream/foldstream"

// floors is the module's layering, lowest first: a package imports only packages on lower floors.
// Commands, examples, benchmarks, conformance and test harnesses stand on the top floor.
var floors = map[string]int{
	"internal/rawjson":           0,
	"internal/wire":              0,
	"internal/heapfloor":         0,
	"foldtype":                   1,
	"console":                    1,
	"client":                     1,
	"stream/driver":              2,
	".":                          3,
	"stream":                     3,
	"stream/driver/sqlitedriver": 3,
	"stream/driver/pgdriver":     3,
	"storeopen":                  4,
	"stream/driver/drivertest":   4,
	"testsupport":                4,
	"host":                       5,
	"server":                     6,
	"node":                       7,
}

const top = 9

func floorOf(rel string) (int, bool) {
	if f, ok := floors[rel]; ok {
		return f, true
	}
	for _, p := range []string{"cmd/", "examples/", "bench/", "conformance/", "internal/harness/", "client/internal/"} {
		if strings.HasPrefix(rel, p) {
			return top, true
		}
	}
	return 0, false
}

type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
}

func main() {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		fail("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			fail("go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })

	bad := 0
	sleeps, totalLines, totalNames := 0, 0, 0
	var storeMethods []string
	fmt.Println("| package | floor | non-test lines | exported names | imports (module packages) |")
	fmt.Println("|---|---:|---:|---:|---|")
	for _, p := range pkgs {
		rel := relOf(p.ImportPath)
		floor, ok := floorOf(rel)
		if !ok {
			fmt.Fprintf(os.Stderr, "layout: %s has no floor: add it to floors\n", rel)
			bad++
		}
		lines, names, methods := 0, 0, map[string][]string{}
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			src, err := os.ReadFile(path)
			if err != nil {
				fail("%v", err)
			}
			lines += strings.Count(string(src), "\n")
			file, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				fail("%v", err)
			}
			names += exported(file, methods)
		}
		for _, f := range append(append([]string{}, p.TestGoFiles...), p.XTestGoFiles...) {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				fail("%v", err)
			}
			sleeps += sleepCalls(file)
		}
		if rel == "stream" {
			storeMethods = methods["Store"]
		}
		var imps []string
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			irel := relOf(imp)
			imps = append(imps, irel)
			if f, ok := floorOf(irel); ok && f >= floor && floor != top {
				fmt.Fprintf(os.Stderr, "layout: %s (floor %d) imports %s (floor %d)\n", rel, floor, irel, f)
				bad++
			}
		}
		totalLines += lines
		totalNames += names
		fmt.Printf("| %s | %s | %d | %d | %s |\n", rel, floorName(floor), lines, names, strings.Join(imps, " "))
	}
	fmt.Printf("| all | | %d | %d | |\n\n", totalLines, totalNames)
	sort.Strings(storeMethods)
	fmt.Printf("stream.Store methods: %d (%s)\n", len(storeMethods), strings.Join(storeMethods, ", "))
	fmt.Printf("time.Sleep calls in tests: %d\n", sleeps)
	if bad > 0 {
		os.Exit(1)
	}
}

func relOf(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

func floorName(f int) string {
	if f == top {
		return "top"
	}
	return fmt.Sprint(f)
}

// exported counts the exported names file declares and records the exported methods of each
// exported receiver type in methods.
func exported(file *ast.File, methods map[string][]string) int {
	n := 0
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				n++
				continue
			}
			if recv := recvName(d.Recv.List[0].Type); ast.IsExported(recv) {
				n++
				methods[recv] = append(methods[recv], d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func recvName(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// sleepCalls counts the calls of time.Sleep in file.
func sleepCalls(file *ast.File) int {
	n := 0
	ast.Inspect(file, func(node ast.Node) bool {
		if c, ok := node.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sleep" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
					n++
				}
			}
		}
		return true
	})
	return n
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "layout: "+format+"\n", args...)
	os.Exit(2)
}
