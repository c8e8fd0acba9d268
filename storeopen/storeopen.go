// Package storeopen opens a stream store from the one string a user gives: a file path (an
// embedded SQLite store) or a postgres:// URL (a PostgreSQL database any number of processes
// share). It is the one place that chooses a driver; the CLI, the examples, the conformance
// adapter and the benchmarks open their stores through it.
//
// Package stream itself imports no concrete driver, so linking is by choice: a program that
// imports storeopen links both drivers (and the PostgreSQL client); a program that only ever
// opens SQLite files imports sqlitedriver and calls stream.OpenDriver, and does not link the
// PostgreSQL client (docs/store.md#opening-a-store):
//
//	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: "foldstream.db"})
//	if err != nil { ... }
//	st, err := stream.OpenDriver(ctx, d, stream.Config{})
//	if err != nil { d.Close(); ... }
package storeopen

import (
	"context"
	"fmt"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// Config configures Open. The zero value is valid.
type Config struct {
	// Store configures the store itself, whatever its database (clock, logger, group size).
	Store stream.Config
	// SQLite tunes the driver Open uses for a file path (Synchronous, ReadConns). Its Path must be
	// empty: the path is Open's dsn.
	SQLite sqlitedriver.Config
	// Postgres tunes the driver Open uses for a postgres:// URL. Its URL must be empty: the URL is
	// Open's dsn. Its Logger defaults to Store.Logger.
	Postgres pgdriver.Config
}

// Open opens (creating if needed) the store that dsn names:
//
//   - a postgres:// or postgresql:// URL opens the store on that PostgreSQL database
//     (docs/postgres.md), shared by every process given the same URL;
//   - anything else is the path of a SQLite file, migrated from an earlier schema when needed
//     (docs/store.md#schema-and-migrations); ":memory:" opens a private in-memory store, for tests.
//     The file stays locked until Close: a second Open of it fails with STORE_LOCKED, and a file
//     or directory the process cannot write fails with STORE_READ_ONLY (package sqlitedriver).
//
// A dsn with another URL scheme (mysql://…, file://…), or "postgres:" without "//", fails with
// INVALID_CONFIG instead of becoming a SQLite file of that name; so do settings the drivers or the
// store refuse. Close the store to release its database.
func Open(ctx context.Context, dsn string, cfg Config) (*stream.Store, error) {
	if pgdriver.IsURL(dsn) {
		return openPostgres(ctx, dsn, cfg)
	}
	if err := checkPath(dsn); err != nil {
		return nil, err
	}
	return openSQLite(ctx, dsn, cfg)
}

// checkPath refuses a dsn that is meant as a URL no linked driver opens.
func checkPath(dsn string) error {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") {
		return foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"dsn": redact(dsn)},
			"open stream store: %q is not a PostgreSQL URL; write it as postgres://user@host:port/db", redact(dsn))
	}
	if scheme, ok := urlScheme(dsn); ok {
		return foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"dsn": redact(dsn), "scheme": scheme},
			"open stream store: no driver opens %s:// URLs; give a SQLite file path or a postgres:// URL", scheme)
	}
	return nil
}

// urlScheme returns the scheme of a dsn of the form scheme://…
func urlScheme(dsn string) (string, bool) {
	i := strings.Index(dsn, "://")
	if i <= 0 {
		return "", false
	}
	for j, c := range dsn[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return dsn[:i], true
}

// redact removes a password from a URL-like dsn for messages.
func redact(dsn string) string {
	if _, ok := urlScheme(dsn); ok || strings.Contains(dsn, "@") {
		return pgdriver.Redacted(dsn)
	}
	return dsn
}

func openSQLite(ctx context.Context, path string, cfg Config) (*stream.Store, error) {
	if cfg.SQLite.Path != "" {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, nil,
			"open stream store: Config.SQLite.Path is %q; leave it empty, the path is Open's argument", cfg.SQLite.Path)
	}
	sc := cfg.SQLite
	sc.Path = path
	d, err := sqlitedriver.Open(ctx, sc)
	if err != nil {
		return nil, err
	}
	s, err := stream.OpenDriver(ctx, d, cfg.Store)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	return s, nil
}

func openPostgres(ctx context.Context, url string, cfg Config) (*stream.Store, error) {
	if cfg.Postgres.URL != "" {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, nil,
			"open stream store: Config.Postgres.URL is set; leave it empty, the URL is Open's argument")
	}
	pc := cfg.Postgres
	pc.URL = url
	if pc.Logger == nil {
		pc.Logger = cfg.Store.Logger
	}
	d, err := pgdriver.Open(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open stream store: %w", err)
	}
	s, err := stream.OpenDriver(ctx, d, cfg.Store)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store: %w", err)
	}
	return s, nil
}
