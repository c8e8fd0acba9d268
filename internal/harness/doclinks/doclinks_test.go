package doclinks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryLinkInTheRepositorysDocsResolves fails on a relative link to a missing file, an
// anchor no heading makes, or a link out of the repository.
func TestEveryLinkInTheRepositorysDocsResolves(t *testing.T) {
	problems, err := Check(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestTheCheckerFindsEachKindOfBrokenLink is the checker's positive control.
func TestTheCheckerFindsEachKindOfBrokenLink(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A doc\n\n## Writes: round trips\n\n## Writes: round trips\n\n"+
		"[ok](#writes-round-trips) [ok2](#writes-round-trips-1) [ok3](b.md#the-b-doc) [ok4](../README.md)\n"+
		"[badanchor](#writes) [badfile](c.md) [badanchor2](b.md#nope) [out](https://example.com/x)\n"+
		"`[code](span.md)`\n```\n[fenced](f.md)\n```\n[up](../../x.md)\n")
	write("docs/b.md", "# The `B` doc\n")
	write("README.md", "see [a](docs/a.md#a-doc)\n")
	problems, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Link+" "+p.Reason)
	}
	want := []string{
		"#writes no heading with this anchor",
		"c.md no such file",
		"b.md#nope no heading with this anchor",
		"https://example.com/x points outside the repository",
		"../../x.md points outside the repository",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlugFollowsGitHubsRules(t *testing.T) {
	for in, want := range map[string]string{
		"Writes: round trips":        "writes-round-trips",
		"The `B` doc":                "the-b-doc",
		"Hand-over — what it costs":  "hand-over--what-it-costs",
		"POST→SSE on one node (p99)": "postsse-on-one-node-p99",
		"[Link](x.md) in a heading":  "link-in-a-heading",
		"snake_case_and 3 digits":    "snake_case_and-3-digits",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
