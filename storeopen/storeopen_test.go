package storeopen_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// goTool returns the go command that built this test.
func goTool(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list a program's dependencies: %v", err)
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// deps lists the packages pkg links (go list -deps), from the module root.
func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-deps", pkg)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	set := make(map[string]bool)
	for _, line := range strings.Fields(string(out)) {
		set[line] = true
	}
	return set
}

// linksUnder reports the first listed package at or under prefix.
func linksUnder(set map[string]bool, prefix string) (string, bool) {
	for p := range set {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return p, true
		}
	}
	return "", false
}

const (
	pgxModule    = "github.com/jackc/pgx"
	sqliteModule = "modernc.org/sqlite"
)

// TestSQLiteOnlyProgramDoesNotLinkThePostgresClient: a program that opens its store with
// sqlitedriver and stream.OpenDriver links SQLite and not pgx, and the core package stream links
// neither driver: stream imports no concrete driver (docs/store.md#opening-a-store).
func TestSQLiteOnlyProgramDoesNotLinkThePostgresClient(t *testing.T) {
	t.Parallel()
	prog := deps(t, "./storeopen/testdata/sqliteonly")
	if p, ok := linksUnder(prog, pgxModule); ok {
		t.Fatalf("a SQLite-only program links %s", p)
	}
	if _, ok := linksUnder(prog, sqliteModule); !ok {
		t.Fatalf("the SQLite-only program does not link %s: the listing proves nothing", sqliteModule)
	}
	core := deps(t, "./stream")
	for _, forbidden := range []string{pgxModule, sqliteModule,
		"github.com/foldstream/foldstream/stream/driver/sqlitedriver", "github.com/foldstream/foldstream/stream/driver/pgdriver"} {
		if p, ok := linksUnder(core, forbidden); ok {
			t.Errorf("package stream links %s", p)
		}
	}
}

// TestPostgresOnlyProgramDoesNotLinkSQLite: the converse — a program that opens its store with
// pgdriver and stream.OpenDriver links pgx and not SQLite; storeopen, which takes either, links
// both.
func TestPostgresOnlyProgramDoesNotLinkSQLite(t *testing.T) {
	t.Parallel()
	prog := deps(t, "./storeopen/testdata/pgonly")
	if p, ok := linksUnder(prog, sqliteModule); ok {
		t.Fatalf("a PostgreSQL-only program links %s", p)
	}
	if _, ok := linksUnder(prog, pgxModule); !ok {
		t.Fatalf("the PostgreSQL-only program does not link %s: the listing proves nothing", pgxModule)
	}
	both := deps(t, "./storeopen")
	for _, want := range []string{pgxModule, sqliteModule} {
		if _, ok := linksUnder(both, want); !ok {
			t.Errorf("storeopen does not link %s", want)
		}
	}
}

// TestOpenPicksSQLiteForAPath: a file path opens a SQLite store there, named by Path; a second
// Open of the same file is refused with STORE_LOCKED.
func TestOpenPicksSQLiteForAPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	st, err := storeopen.Open(ctx, path, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if _, ok := st.Driver().(*sqlitedriver.Driver); !ok {
		t.Fatalf("driver for a path: got %T, want *sqlitedriver.Driver", st.Driver())
	}
	if st.Path() != path {
		t.Fatalf("Path: got %q, want %q", st.Path(), path)
	}
	if _, err := st.Events().Stream("/a").Append(ctx, foldtype.EventInput{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	if !fileExists(path) {
		t.Fatalf("no database file at %s", path)
	}
	if again, err := storeopen.Open(ctx, path, storeopen.Config{}); !errors.Is(err, foldtype.ErrStoreLocked) {
		if again != nil {
			again.Close(context.Background())
		}
		t.Fatalf("second Open of %s: got %v, want STORE_LOCKED", path, err)
	}
}

// TestOpenPicksPostgresForAURL: a postgres:// URL opens the store on that database, and Path
// names it without the password.
func TestOpenPicksPostgresForAURL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	withPassword := strings.Replace(url, "postgres://postgres@", "postgres://postgres:secret@", 1)
	if withPassword == url {
		withPassword = url // a URL of another shape: the redaction is checked only for this one
	}
	st, err := storeopen.Open(context.Background(), withPassword, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if _, ok := st.Driver().(*pgdriver.Driver); !ok {
		t.Fatalf("driver for %s: got %T, want *pgdriver.Driver", url, st.Driver())
	}
	if strings.Contains(st.Path(), "secret") || !strings.HasPrefix(st.Path(), "postgres://") {
		t.Fatalf("Path: got %q, want the URL without its password", st.Path())
	}
	if _, err := st.Events().Stream("/a").Append(context.Background(), foldtype.EventInput{Type: "x"}); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesURLsNoDriverOpens: a URL of another scheme, or a mistyped postgres URL, fails
// with INVALID_CONFIG and creates no SQLite file of that name.
func TestOpenRefusesURLsNoDriverOpens(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // a dsn taken for a relative path would create its file here
	for _, dsn := range []string{"mysql://root@localhost/db", "file:///tmp/x.db", "postgres:/localhost/db", "postgresql:db", "Postgres:x"} {
		st, err := storeopen.Open(context.Background(), dsn, storeopen.Config{Store: stream.Config{Logger: quiet}})
		if err == nil {
			st.Close(context.Background())
			t.Fatalf("Open(%q): got a store, want INVALID_CONFIG", dsn)
		}
		if !errors.Is(err, foldtype.ErrInvalidConfig) {
			t.Fatalf("Open(%q): got %v, want INVALID_CONFIG", dsn, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("refused dsns left files behind: %v", entries)
	}
}

// TestOpenRefusesSettingsThatMakeNoSense: settings the store or the driver cannot honour fail
// Open with INVALID_CONFIG instead of being replaced by a default.
func TestOpenRefusesSettingsThatMakeNoSense(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, cfg := range map[string]storeopen.Config{
		"unknown synchronous mode": {SQLite: sqlitedriver.Config{Synchronous: "OFF"}},
		"negative read conns":      {SQLite: sqlitedriver.Config{ReadConns: -1}},
		"path given twice":         {SQLite: sqlitedriver.Config{Path: "other.db"}},
		"negative max group":       {Store: stream.Config{MaxGroup: -1}},
	} {
		st, err := storeopen.Open(context.Background(), filepath.Join(dir, "s.db"), cfg)
		if err == nil {
			st.Close(context.Background())
			t.Fatalf("%s: got a store, want INVALID_CONFIG", name)
		}
		if !errors.Is(err, foldtype.ErrInvalidConfig) {
			t.Fatalf("%s: got %v, want INVALID_CONFIG", name, err)
		}
	}
	if _, err := storeopen.Open(context.Background(), "", storeopen.Config{}); !errors.Is(err, foldtype.ErrInvalidConfig) {
		t.Fatalf("empty dsn: got %v, want INVALID_CONFIG", err)
	}
	// A lower-case mode is the same mode.
	st, err := storeopen.Open(context.Background(), filepath.Join(dir, "s.db"), storeopen.Config{SQLite: sqlitedriver.Config{Synchronous: "normal"}})
	if err != nil {
		t.Fatalf("synchronous \"normal\": %v", err)
	}
	st.Close(context.Background())
}

// The engine and the JSON-Schema libraries it validates payloads with.
var engineLinks = []string{"github.com/santhosh-tekuri/jsonschema", "github.com/invopop/jsonschema"}

// linksEngine reports whether set holds the engine (the module's root package, exactly) or one of
// its JSON-Schema libraries.
func linksEngine(set map[string]bool) (string, bool) {
	if set["github.com/foldstream/foldstream"] {
		return "github.com/foldstream/foldstream", true
	}
	for _, m := range engineLinks {
		if p, ok := linksUnder(set, m); ok {
			return p, true
		}
	}
	return "", false
}

// TestStoreAndDriversDoNotLinkTheEngine: the store, its drivers, storeopen and the HTTP server
// speak the shared vocabulary of package foldtype, not the engine's: none of them links package
// foldstream or its JSON-Schema libraries. (The host, which runs engines, does, so the listing
// can tell.)
func TestStoreAndDriversDoNotLinkTheEngine(t *testing.T) {
	t.Parallel()
	if _, ok := linksEngine(deps(t, "./host")); !ok {
		t.Fatal("package host does not link the engine: the listing proves nothing")
	}
	for _, pkg := range []string{"./foldtype", "./stream", "./stream/driver", "./stream/driver/sqlitedriver",
		"./stream/driver/pgdriver", "./storeopen", "./server"} {
		if p, ok := linksEngine(deps(t, pkg)); ok {
			t.Errorf("%s links %s", pkg, p)
		}
	}
}
