// Package doclinks checks the links of the repository's Markdown files: every relative link
// names a file that exists, every #anchor names a heading of its target, and no link leaves the
// repository (its docs state in their own words what they rely on). The test in this package
// runs the check over the module, so CI fails on a broken link.
package doclinks

import (
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one broken link: the file and line it is on, the link, and why it is broken.
type Problem struct {
	File   string
	Line   int
	Link   string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Link, p.Reason)
}

// linkRE matches an inline Markdown link or image, [text](target) or ![alt](target), capturing
// the target up to the first space or closing parenthesis (titles are not used here).
var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// Check walks the Markdown files under root (skipping dot directories, node_modules and
// testdata) and returns every broken link, sorted by file and line.
func Check(root string) ([]Problem, error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{} // absolute path → its headings' anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := Anchors(string(b))
		anchors[path] = a
		return a, nil
	}
	var out []Problem
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		for _, l := range links(string(b)) {
			if p, bad := checkLink(root, f, l.target, anchorsOf); bad {
				out = append(out, Problem{File: rel, Line: l.line, Link: l.target, Reason: p})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out, nil
}

func checkLink(root, from, target string, anchorsOf func(string) (map[string]bool, error)) (string, bool) {
	switch {
	case strings.HasPrefix(target, "http://127.0.0.1"), strings.HasPrefix(target, "http://localhost"):
		return "", false // a local server's address in an example
	case strings.Contains(target, "://"), strings.HasPrefix(target, "mailto:"):
		return "points outside the repository", true
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := from
	if file != "" {
		if strings.HasPrefix(file, "/") {
			path = filepath.Join(root, file)
		} else {
			path = filepath.Join(filepath.Dir(from), file)
		}
		if r, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(r, "..") {
			return "points outside the repository", true
		}
		if _, err := os.Stat(path); err != nil {
			return "no such file", true
		}
	}
	if anchor == "" {
		return "", false
	}
	if !strings.HasSuffix(path, ".md") {
		return "", false // an anchor into a non-Markdown file (a source line) is not checked
	}
	a, err := anchorsOf(path)
	if err != nil {
		return err.Error(), true
	}
	if !a[anchor] {
		return "no heading with this anchor", true
	}
	return "", false
}

type link struct {
	target string
	line   int
}

// proseLines yields the lines of a Markdown text outside fenced code blocks, with their numbers
// (from 1).
func proseLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		inFence := false
		for i, line := range strings.Split(text, "\n") {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				inFence = !inFence
				continue
			}
			if !inFence && !yield(i+1, line) {
				return
			}
		}
	}
}

// links returns the inline links of a Markdown text outside fenced code blocks and code spans.
func links(text string) []link {
	var out []link
	for n, line := range proseLines(text) {
		for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, link{target: m[1], line: n})
		}
	}
	return out
}

// stripCodeSpans drops `code spans`, whose brackets are not links.
func stripCodeSpans(line string) string {
	var b strings.Builder
	in := false
	for _, r := range line {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors the headings of a Markdown text get, as GitHub forms them: the
// heading's text lower-cased, inline markup dropped, every character that is not a letter, a
// digit, a space, a hyphen or an underscore removed, spaces turned into hyphens, and "-1", "-2", …
// added to repeats. Explicit <a id="…"> and <a name="…"> anchors count too.
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range idRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if h == "" || h[0] != ' ' {
			continue
		}
		s := Slug(h)
		if n, dup := seen[s]; dup {
			seen[s] = n + 1
			out[fmt.Sprintf("%s-%d", s, n+1)] = true
			continue
		}
		seen[s] = 0
		out[s] = true
	}
	return out
}

// idRE matches an explicit HTML anchor.
var idRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// mdLinkRE matches a link inside a heading, whose text alone counts for the anchor.
var mdLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Slug is the anchor GitHub gives a heading's text (see Anchors).
func Slug(heading string) string {
	h := strings.TrimSpace(heading)
	h = mdLinkRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func markdownFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}
