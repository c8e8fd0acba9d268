// Package pgtest gives tests a private PostgreSQL schema on the server named by the
// FOLDSTREAM_TEST_POSTGRES environment variable (for example
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
//
// Each call creates a fresh schema and returns a URL whose connections use it (search_path), so
// tests run in parallel without seeing each other's tables; the schema is dropped when the test
// ends. Outside CI a missing variable skips the test; under CI (CI set to anything) a missing variable or an
// unreachable server fails it, so PostgreSQL tests are never skipped silently.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the environment variable holding the test server's URL.
const EnvVar = "FOLDSTREAM_TEST_POSTGRES"

// ServerURL returns the test server's URL, skipping the test when none is configured (failing it
// under CI).
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		if InCI() {
			t.Fatalf("%s is not set: CI must run the PostgreSQL tests (.ci/run starts a server and sets it)", EnvVar)
		}
		t.Skipf("%s is not set; set it to a PostgreSQL URL to run this test", EnvVar)
	}
	return u
}

// InCI reports whether the tests run under CI: CI is set to anything non-empty (CI=true, CI=1),
// as the other harnesses read it.
func InCI() bool { return os.Getenv("CI") != "" }

// URL creates a fresh schema on the test server and returns a URL whose connections use it. The
// schema is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	base := ServerURL(t)
	schema := "fs_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL server (%s): %v", EnvVar, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() { DropSchema(t, base, schema) })
	return WithSchema(t, base, schema)
}

// WithSchema returns base with its connections' search_path set to schema.
func WithSchema(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvVar, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// DropSchema drops schema and everything in it, ending the sessions still using the database
// objects in it first is not needed: DROP waits for their locks, bounded by a lock timeout.
func DropSchema(t testing.TB, base, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Logf("drop test schema %s: %v", schema, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Logf("drop test schema %s: %v", schema, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
