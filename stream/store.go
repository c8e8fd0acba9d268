// Package stream is foldstream's durable stream store: many streams by path in one database,
// reached through a driver (package driver): an embedded SQLite file written by one process
// (package sqlitedriver), or a PostgreSQL database shared by any number of processes (package
// pgdriver). The store never imports a concrete driver: [OpenDriver] takes one, and package
// storeopen picks one from a file path or a postgres:// URL. One kernel (the writer, group
// commit, the insert path, the caches and the per-stream wakes, with the hooks its layers
// register: package stream/internal/kernel, docs/store.md#the-kernel-and-its-layers), which a
// [Store] opens and composes its layers on, serves the same data through two faces, each a type
// of its own:
//
//   - [Events], the event view (EventStream's Append and Read, subscriptions, checkpoints, claims,
//     wake records) that processor engines and package host run against, and
//   - [Protocol], the Durable Streams protocol view (records, content types, closure, forks, TTL,
//     idempotent producers, subscriptions and webhooks) that package server exposes over HTTP.
//
// # Concurrency
//
// Every write goes through one writer goroutine (package stream/internal/kernel, writer.go). Callers hand it a function; the
// writer collects whatever functions are queued, runs each inside its own savepoint of one
// transaction, and commits once (group commit): one fsync covers every caller in the group, and a
// function that fails rolls back to its savepoint without failing its neighbours. On a database
// only this process writes (SQLite) the writer is the only goroutine that assigns offsets, so
// offsets of one stream are strictly increasing without a lock per stream; on a shared database
// the driver serialises writers of one stream across processes (docs/postgres.md). Readers use
// separate read transactions and see committed snapshots.
//
// # Durability
//
// An acknowledged write survives a process crash and a power loss: the drivers commit with
// synchronous=FULL (SQLite) and synchronous_commit on (PostgreSQL) by default. Only
// sqlitedriver.Config.Synchronous may relax this, to NORMAL; it is never the default.
package stream

import (
	"context"
	"log/slog"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/feeds"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/processors"
)

// Config configures a Store. The zero value is valid.
type Config struct {
	// Clock is the time source for createdAt stamps, TTLs, claims and alarms. Defaults to
	// foldtype.SystemClock.
	Clock foldtype.Clock
	// Logger receives the store's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxGroup caps how many queued writes share one transaction. Defaults to 256; negative is
	// refused.
	MaxGroup int
	// MaxCommitsInFlight caps, on a shared database, how many groups' COMMITs may be on their way
	// at once while the writer builds the next group (docs/store.md#one-writer); 1 keeps one
	// commit at a time. Defaults to DefaultMaxCommitsInFlight; negative is refused.
	MaxCommitsInFlight int
	// CommitStallAfter is how long a COMMIT may be on its way before the store reports its
	// commits stalled (CommitsStalled; /readyz answers 503). Defaults to
	// DefaultCommitStallAfter.
	CommitStallAfter time.Duration
	// ProducerReorderWait is how long a protocol append whose producer seq is ahead of the next
	// expected one waits for the earlier seqs (pipelined requests overtaking each other) before
	// it is refused with a sequence gap. Defaults to DefaultProducerReorderWait; negative
	// disables the wait.
	ProducerReorderWait time.Duration
	// MaxCachedStreams caps how many streams the writer keeps in memory (their rows and offset
	// marks); a write to a stream beyond them reads its row first. Defaults to
	// DefaultMaxCachedStreams; negative is refused.
	MaxCachedStreams int
	// MaxEphemeralBytes caps what the ephemeral rings of all streams hold together (each ring is
	// bounded by EphemeralRingBytes on its own): past it, the rings of the streams whose last
	// ephemeral is oldest are dropped whole (docs/store.md#appending). Defaults to
	// DefaultMaxEphemeralBytes (64 MiB); negative is refused.
	MaxEphemeralBytes int
}

// Store is an open stream store: many streams by path in one database, behind one driver
// (docs/store.md). All its methods, and those of its faces, are safe for concurrent use.
//
// Open it with storeopen.Open (a file path or a postgres:// URL) or with [OpenDriver] over a driver
// of your choosing; close it with [Store.Close] after the host and the server on it have shut
// down. A Store holds the kernel — the writer and its group commit, the insert path, the caches,
// the per-stream wakes (docs/store.md#the-kernel-and-its-layers) — and offers it through two faces
// (docs/store.md#the-two-faces), and the small transactional face package subscriptions builds on:
//
//   - [Store.Events], the event face that processor engines and the host run against: a path's
//     [EventStream] (Append, Read, a processor's Claim), subscriptions, checkpoints, claims and
//     alarms, wake records;
//   - [Store.Protocol], the Durable Streams protocol face that package server serves over HTTP:
//     create, append and read records, metadata, listing, deletion, TTL expiry, idempotent
//     producers;
//   - [Store.Subscriptions], the rows, locks, wake-event appends, signing keys and lease that
//     package subscriptions needs for the protocol's reserved subscription APIs.
//
// The Store itself only closes and says what it runs on ([Store.Clock], [Store.Driver],
// [Store.Path], [Store.ObserveCommits]).
//
// Rules kept in one place (docs/store.md#one-writer,
// docs/store.md#durability-guarantees-and-their-limits), the same through either face: every write
// goes through one writer goroutine that group-commits whatever is queued, each write in its own
// savepoint, so a refused write never fails its neighbours; a write returns only after its
// transaction committed (durable by the driver's setting), and a refusal is a *foldtype.Error with
// a code from the catalogue; offsets of a stream are assigned by the writer (on a shared database
// under the driver's per-stream lock), gapless and increasing; a commit is handed to the stream's
// subscribers in commit order, and their push ranges chain with no gap; reads see committed data
// only; a deleted stream's incarnation never passes its events, claims or checkpoints to a stream
// created again at its path.
type Store struct {
	// k is the kernel (package kernel): the writer, the write transaction, the caches, the insert
	// path and the per-stream wakes. Every layer below reaches it through its exported API.
	k *kernel.Store

	cat      *catalog.Catalog   // what both faces mean by a stream (package catalog)
	events   *Events            // the event face (faces.go)
	protocol *Protocol          // the protocol face (package protocol)
	subs     *SubscriptionStore // the subscription face (package substore)

	opts Config
	// What the kernel was opened over, set once: the layers read them without asking the kernel.
	clock     foldtype.Clock
	log       *slog.Logger
	drv       driver.Driver
	caps      driver.Capabilities
	exclusive bool

	check   appendChecks        // SetAppendCheck
	ev      *eventView          // the event view's in-memory state (events.go)
	pushes  *feeds.Hub          // subscriptions, feeds and ephemeral rings (package feeds)
	procs   *processors.Records // claims and alarms, parked events, processor states (package processors)
	created createdListeners    // OnStreamCreated's listeners (list.go)

	// ls is what the layers keep on the writer goroutine (layers.go): only write functions and
	// the hooks the writer runs touch it.
	ls layerState
	// recentExt and noCheckpointsExt are the layers' row extensions (layers.go).
	recentExt        kernel.RowExt[*recentEvents]
	noCheckpointsExt kernel.RowExt[bool]
}

// OpenDriver opens a store over a driver: it migrates the driver's schema, starts the writer and
// subscribes to the driver's notifications. Close closes the driver; when OpenDriver fails, the
// caller still owns d and closes it. ctx bounds the opening (the migration, the first
// connections); the store's background work runs until Close.
//
// The driver comes from sqlitedriver.Open (a file), pgdriver.Open (a PostgreSQL database), or
// storeopen.Open, which picks one of them from a file path or a postgres:// URL. Config values that
// make no sense (a negative MaxGroup) fail with INVALID_CONFIG.
func OpenDriver(ctx context.Context, d driver.Driver, opts Config) (*Store, error) {
	if d == nil {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, nil, "open stream store: no driver given; open one with sqlitedriver.Open or pgdriver.Open, or use storeopen.Open")
	}
	if opts.MaxCommitsInFlight < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxCommitsInFlight": opts.MaxCommitsInFlight},
			"open stream store: MaxCommitsInFlight is %d; give a positive number of commits, or 0 for the default", opts.MaxCommitsInFlight)
	}
	if opts.MaxGroup < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxGroup": opts.MaxGroup},
			"open stream store: MaxGroup is %d; give a positive number of writes per transaction, or 0 for the default", opts.MaxGroup)
	}
	if opts.MaxCachedStreams < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxCachedStreams": opts.MaxCachedStreams},
			"open stream store: MaxCachedStreams is %d; give a positive number of streams, or 0 for the default", opts.MaxCachedStreams)
	}
	if opts.MaxEphemeralBytes < 0 {
		return nil, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"maxEphemeralBytes": opts.MaxEphemeralBytes},
			"open stream store: MaxEphemeralBytes is %d; give a positive number of bytes, or 0 for the default", opts.MaxEphemeralBytes)
	}
	if opts.MaxEphemeralBytes == 0 {
		opts.MaxEphemeralBytes = DefaultMaxEphemeralBytes
	}
	if opts.MaxCachedStreams == 0 {
		opts.MaxCachedStreams = DefaultMaxCachedStreams
	}
	if opts.Clock == nil {
		opts.Clock = foldtype.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxGroup == 0 {
		opts.MaxGroup = 256
	}
	if opts.MaxCommitsInFlight == 0 {
		opts.MaxCommitsInFlight = DefaultMaxCommitsInFlight
	}
	if opts.CommitStallAfter <= 0 {
		opts.CommitStallAfter = DefaultCommitStallAfter
	}
	if opts.ProducerReorderWait == 0 {
		opts.ProducerReorderWait = DefaultProducerReorderWait
	}
	caps := driver.CapabilitiesOf(d)
	s := &Store{opts: opts, clock: opts.Clock, log: opts.Logger, drv: d, caps: caps, exclusive: d.Exclusive()}
	k, err := kernel.Open(ctx, d, kernel.Config{
		Clock:              opts.Clock,
		Logger:             opts.Logger,
		MaxGroup:           opts.MaxGroup,
		MaxCommitsInFlight: opts.MaxCommitsInFlight,
		CommitStallAfter:   opts.CommitStallAfter,
		MaxCachedStreams:   opts.MaxCachedStreams,
		DecodeEvent:        decodeEvent,
	}, func(k *kernel.Store) {
		s.k = k
		s.useLayers()
	})
	if err != nil {
		return nil, err
	}
	s.k = k
	return s, nil
}

// Closed reports whether Close was called.
func (s *Store) Closed() bool { return s.k.Closed() }

// Driver returns the store's driver; driver.CapabilitiesOf tells what more it offers.
func (s *Store) Driver() driver.Driver { return s.drv }

// Path names the store's database for logs and messages: the file path of a SQLite store, the
// URL (password removed) of a PostgreSQL one; "" when its driver does not say.
func (s *Store) Path() string { return s.k.Path() }

// Clock returns the store's clock.
func (s *Store) Clock() foldtype.Clock { return s.clock }

// Close closes the store. At once, before it waits for anything: intake stops (every later call
// fails with code CLOSED, see [ErrStoreClosed]), no subscription starts, and the alarm loop stops
// taking alarms. Then it drains: running alarm handlers get their context cancelled and are waited
// for, subscription deliveries in progress finish, every write queued before intake stopped runs
// and commits, read transactions in flight end, and the database is closed (no file of it stays
// open). It returns the driver's close error, or ctx's error when ctx ends first. Calling it
// again waits again, with its own ctx, for the same result.
//
// Close takes a context because it waits: for the writer's queue (each write as long as the
// database takes, a network round trip away on PostgreSQL) and for deliveries into engines (a
// batch with blocking work runs to its end). When ctx ends first the drain goes on in the
// background and the database closes when it is done; nothing acknowledged is lost and nothing
// new is accepted. A program that exits at that point loses no acknowledged write either: every
// acknowledged write was committed (durable by the driver's setting) before it was acknowledged.
func (s *Store) Close(ctx context.Context) error { return s.k.Close(ctx) }

// ErrStoreClosed is returned by every operation on a closed store.
var ErrStoreClosed = kernel.ErrStoreClosed

// CommitStats describes one group commit of the store's writer (Store.ObserveCommits): Writes is
// the number of writes it made durable together, Duration how long the commit itself took on the
// store's clock, Failed that it failed (none of its writes was acknowledged).
type CommitStats = kernel.CommitStats

// ObserveCommits calls fn after every later group commit with its size and duration, for metrics.
// fn runs on the writer goroutine: it must return at once, never block and never call the store.
// The returned function stops the observation (a commit already landing may still call fn once).
func (s *Store) ObserveCommits(fn func(CommitStats)) (stop func()) { return s.k.ObserveCommits(fn) }

// WriterQueue returns how many writes wait for the store's writer now, queued and not yet taken
// into a group commit: a backlog that grows says the database commits slower than writes arrive.
// It reads a channel's length: no lock, for metrics at scrape time.
func (s *Store) WriterQueue() int { return s.k.WriterQueue() }

// CommitsStalled reports whether the store's commits stall, and why: the last commit failed
// because the database cannot be reached or did not confirm it, or a commit has been on its way
// longer than Config.CommitStallAfter. It reports false again once a commit succeeds; while
// stalled, a probe commits nothing every second on drivers that can (driver.CommitProber), so the
// store finds out by itself when it may write again. /readyz answers 503 while this is true.
func (s *Store) CommitsStalled() (bool, string) { return s.k.CommitsStalled() }

// DefaultMaxCachedStreams is the default of Config.MaxCachedStreams.
const DefaultMaxCachedStreams = kernel.DefaultMaxCachedStreams

// DefaultMaxCommitsInFlight is the default of Config.MaxCommitsInFlight: one commit on its way
// at a time.
const DefaultMaxCommitsInFlight = kernel.DefaultMaxCommitsInFlight

// DefaultCommitStallAfter is how long a COMMIT may be on its way before the store reports its
// commits stalled (Config.CommitStallAfter).
const DefaultCommitStallAfter = kernel.DefaultCommitStallAfter
