package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The stream kernel (docs/store.md#the-kernel-and-its-layers) is the package kernelPkg; its
// layers are package stream, which opens a store and composes them, and every other package
// below stream/ but the drivers (a layer moved into a package of its own, such as
// stream/internal/pause, or a face such as stream/internal/protocol).
const kernelPkg = "stream/internal/kernel"

// The kernel's bounds: its non-test lines, the non-test lines of each layer (package stream, and
// a face or a feature in a package of its own below stream/), and the lines of any one non-test
// file of the kernel or of a layer.
const (
	maxKernelLines = 4000
	maxLayerLines  = 2500
	maxFileLines   = 1000
)

// isLayer reports whether the package at rel is a layer on the stream kernel.
func isLayer(rel string) bool {
	return rel == "stream" || (strings.HasPrefix(rel, "stream/") && rel != kernelPkg &&
		rel != "stream/driver" && !strings.HasPrefix(rel, "stream/driver/"))
}

// kernelFigures prints the stream kernel's figures: its non-test lines and its layers', and the
// largest file of either. It returns how many rules they break: the kernel imports a layer (Go
// forbids the cycle with package stream; this catches a layer in a package of its own), the
// kernel is over maxKernelLines, a layer (package stream among them) is over maxLayerLines, or a file is over
// maxFileLines.
func kernelFigures(pkgs []pkg) (bad int) {
	kernelLines, layerLines, layers, largest, largestName := 0, 0, 0, 0, ""
	var over, perLayer []string
	found := false
	for _, p := range pkgs {
		rel := relOf(p.ImportPath)
		inKernel := rel == kernelPkg
		if !inKernel && !isLayer(rel) {
			continue
		}
		if inKernel {
			found = true
			bad += kernelBackCalls(p)
			for _, imp := range p.Imports {
				if irel := relOf(imp); strings.HasPrefix(imp, module+"/") && isLayer(irel) {
					fmt.Fprintf(os.Stderr, "layout: the stream kernel imports the layer %s: register a hook instead (docs/store.md#the-kernel-and-its-layers)\n", irel)
					bad++
				}
			}
		} else {
			layers++
		}
		pkgLines := 0
		for _, f := range p.GoFiles {
			src, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				fail("%v", err)
			}
			n := strings.Count(string(src), "\n")
			pkgLines += n
			if inKernel {
				kernelLines += n
			} else {
				layerLines += n
			}
			name := rel + "/" + f
			if n > largest {
				largest, largestName = n, name
			}
			if n > maxFileLines {
				over = append(over, fmt.Sprintf("%s (%d lines)", name, n))
			}
		}
		if !inKernel {
			perLayer = append(perLayer, fmt.Sprintf("%s %d", rel, pkgLines))
			if pkgLines > maxLayerLines {
				fmt.Fprintf(os.Stderr, "layout: the layer %s has %d non-test lines, over %d: split it by concern (docs/store.md#the-kernel-and-its-layers)\n", rel, pkgLines, maxLayerLines)
				bad++
			}
		}
	}
	if !found {
		fail("no package %s", kernelPkg)
	}
	fmt.Printf("stream kernel (%s): %d non-test lines; its layers %d, in %d packages; largest file %s (%d lines)\n",
		kernelPkg, kernelLines, layerLines, layers, largestName, largest)
	fmt.Printf("stream layers: %s\n", strings.Join(perLayer, ", "))
	if kernelLines > maxKernelLines {
		fmt.Fprintf(os.Stderr, "layout: the stream kernel has %d non-test lines, over %d: move a feature into a layer (docs/store.md#the-kernel-and-its-layers)\n", kernelLines, maxKernelLines)
		bad++
	}
	for _, o := range over {
		fmt.Fprintf(os.Stderr, "layout: %s is over %d lines: split it by concept\n", o, maxFileLines)
		bad++
	}
	return bad
}
