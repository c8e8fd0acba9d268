// Package testhooks holds the counters and queries that tests read from the store and its drivers
// without those being part of the public API. The tests that read them are in other packages (the
// store's tests read its drivers', server's and host's tests the store's and the PostgreSQL
// driver's), so an export_test.go, seen only by its own package's tests, is not enough.
//
// Each hook is a function variable that the package owning the value sets in an init; a test
// calls it with the owner's value (a *stream.Store, a *pgdriver.Driver, a *sqlitedriver.Driver).
// The owners import this package, so it imports none of them: a hook takes its receiver as any
// and the owner's setter asserts the type, panicking on any other. A hook is nil until its owner
// is linked in, which a test calling it always does, since it holds the owner's value.
//
// Nothing in production calls these hooks. Setting them changes nothing the owners do: the
// counters are kept whether or not a test reads them, and the raw query reads on a connection of
// the owner's read pool.
package testhooks

import (
	"context"
	"database/sql"
)

// StoreCachedReads returns how many live reads a *stream.Store answered from its tail cache
// without reading the database (docs/store.md#live-reads). Set by package stream.
var StoreCachedReads func(store any) int64

// SQLiteSavepoints returns how many savepoints a *sqlitedriver.Driver's writer opened: a write
// that ran no SQL opened none. Set by package sqlitedriver.
var SQLiteSavepoints func(driver any) int64

// SQLiteQueryRow runs a one-row query on a read connection of a *sqlitedriver.Driver. Set by
// package sqlitedriver.
var SQLiteQueryRow func(ctx context.Context, driver any, query string, args ...any) *sql.Row

// SQLiteQuery runs a query on a read connection of a *sqlitedriver.Driver. Set by package
// sqlitedriver.
var SQLiteQuery func(ctx context.Context, driver any, query string, args ...any) (*sql.Rows, error)

// PGWriteRoundTrips returns how many round trips a *pgdriver.Driver's write transactions have
// taken to the database so far: a statement whose result a write needs costs one, together with
// every statement queued before it (docs/postgres.md#writes-round-trips). Set by package pgdriver.
var PGWriteRoundTrips func(driver any) int64

// PGReads returns how many read transactions (Read calls) a *pgdriver.Driver has begun. Set by
// package pgdriver.
var PGReads func(driver any) int64

// PGListenMarkers returns how many markers a *pgdriver.Driver's listen barrier has sent: one per
// round its callers shared. Set by package pgdriver.
var PGListenMarkers func(driver any) uint64
