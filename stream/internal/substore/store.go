// Package substore is the store's subscription face (docs/store.md#the-two-faces): the rows,
// locks, wake-event appends, signing keys and lease that package subscriptions builds the
// protocol's reserved subscription APIs on. It calls only down: the kernel for its writes and
// reads, the catalogue for a stream's liveness; the one thing it needs of the protocol face, an
// append of JSON messages in its write, the store hands it as a function ([Config.AppendJSON]).
package substore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// SubscriptionStore is the store's subscription face: the transactional primitives package
// subscriptions builds the protocol's reserved subscription APIs on
// (docs/server.md#the-subscriptions-package). Take it with the store's Subscriptions; it is safe
// for concurrent use and valid until the store closes.
//
// It knows rows, not rules: a subscription is an opaque row (driver.SubscriptionRow) whose
// configuration and state package subscriptions encodes, decides and writes back. What it
// offers is what those decisions need from the store and nothing else:
//
//   - [SubscriptionStore.Update]: one write function on the store's writer, in which a
//     [SubscriptionTx] locks, reads and writes subscription rows, reads the streams they link,
//     appends a wake event to a wake stream and reads or writes the signing keys — all committed
//     together or not at all;
//   - [SubscriptionStore.View]: a read-only snapshot of the rows and keys;
//   - notices: [SubscriptionStore.Notify] and [SubscriptionStore.Watch] (a subscription's state
//     changed in this process), [SubscriptionStore.WatchChanges] (a stream changed, here or on
//     another node);
//   - the driver's lease, for the one node of a shared database that runs delivery
//     ([SubscriptionStore.TakeLease], [SubscriptionStore.ReleaseLease]).
type SubscriptionStore struct {
	k          *kernel.Store
	cat        *catalog.Catalog
	drv        driver.Driver
	clock      foldtype.Clock
	log        *slog.Logger
	appendJSON func(t *kernel.Tx, path string, body []byte) error

	kicks kernel.Callbacks[string] // Watch's functions

	leaseMu sync.Mutex
	leases  map[string]driver.Lease // the leases taken last, by key
}

// SubscriptionTx is one write function's access to subscriptions (see [SubscriptionStore.Update]).
// It is valid only inside that function.
type SubscriptionTx struct {
	ss *SubscriptionStore
	t  *kernel.Tx
}

// Context is the write function's context.
func (x *SubscriptionTx) Context() context.Context { return x.t.Context() }

// Now is the write function's time on the store's clock (the same for every call inside it).
func (x *SubscriptionTx) Now() time.Time { return x.t.Now() }

// Lock serialises the writers of subscription id until the transaction ends (across processes on
// a shared database). Take it before reading a row the function is going to change.
func (x *SubscriptionTx) Lock(id string) error {
	return x.t.Driver().LockSubscription(x.t.Context(), id)
}

// Subscription returns the row of subscription id, and false when there is none.
func (x *SubscriptionTx) Subscription(id string) (driver.SubscriptionRow, bool, error) {
	return x.t.Driver().Subscription(x.t.Context(), id)
}

// PutSubscription inserts or replaces the row r.ID.
func (x *SubscriptionTx) PutSubscription(r driver.SubscriptionRow) error {
	return x.t.Driver().PutSubscription(x.t.Context(), r)
}

// DeleteSubscription removes the row of subscription id (no error when there is none).
func (x *SubscriptionTx) DeleteSubscription(id string) error {
	return x.t.Driver().DeleteSubscription(x.t.Context(), id)
}

// SigningKeys returns every webhook signing key, oldest first.
func (x *SubscriptionTx) SigningKeys() ([]driver.SigningKey, error) {
	return x.t.Driver().SigningKeys(x.t.Context())
}

// PutSigningKey inserts or replaces the signing key k.KID.
func (x *SubscriptionTx) PutSigningKey(k driver.SigningKey) error {
	return x.t.Driver().PutSigningKey(x.t.Context(), k)
}

// StreamRef is what a subscription knows of a stream it links: its store path, its identity (a
// stream created again at a path gets a new one) and its tail.
type StreamRef struct {
	Path string
	ID   int64
	Tail int64
}

// LiveStream returns the stream at the store path if it is live (not deleted), and false when it
// is missing or deleted.
func (x *SubscriptionTx) LiveStream(path string) (StreamRef, bool, error) {
	row, err := x.t.Driver().StreamByPath(x.t.Context(), path)
	if errors.Is(err, driver.ErrNoStream) {
		return StreamRef{}, false, nil
	}
	if err != nil {
		return StreamRef{}, false, err
	}
	if row.State != 0 {
		return StreamRef{}, false, nil
	}
	return StreamRef{Path: row.Path, ID: row.ID, Tail: row.Tail}, true, nil
}

// StreamsUnder returns up to limit stream rows whose store path starts with prefix and sorts after
// after (from the first one when after is ""), in path order. A page shorter than limit is the
// last one.
func (x *SubscriptionTx) StreamsUnder(prefix, after string, limit int) ([]StreamRef, error) {
	q := driver.ListQuery{From: prefix, Inclusive: true, Limit: limit}
	if after != "" {
		q.From, q.Inclusive = after, false
	}
	if below, bounded := catalog.PrefixUpperBound(prefix); bounded {
		q.Below = below
	}
	rows, err := x.t.Driver().ListStreams(x.t.Context(), q)
	if err != nil {
		return nil, err
	}
	out := make([]StreamRef, 0, len(rows))
	for _, r := range rows {
		out = append(out, StreamRef{Path: r.Path, ID: r.ID, Tail: r.Tail})
	}
	return out, nil
}

// LockJSONStream takes the live stream at the store path for this function's appends (on a shared
// database it locks it before anything of the function is written) and checks that it is an open
// JSON stream. An error means nothing was written: the stream is missing, not live, closed or not
// JSON (or could not be read), and the function may go on without appending to it.
func (x *SubscriptionTx) LockJSONStream(path string) error {
	m, err := x.ss.cat.LiveStream(x.t, path)
	switch {
	case err != nil:
		return err
	case m.Row.Closed:
		return foldtype.NewError(foldtype.CodeStreamClosed, nil, "the stream %s is closed", catalog.QuotePath(path))
	case !kernel.IsJSONContentType(m.Row.ContentType):
		return foldtype.NewError(foldtype.CodeConflict, nil, "the stream %s is not a JSON stream", catalog.QuotePath(path))
	}
	return nil
}

// AppendJSON appends body, a JSON array of messages, to the JSON stream at the store path as one
// record, committed with the rest of the function; take the stream with LockJSONStream first. A
// *foldtype.Error is a refusal of the append decided before it wrote anything (a paused stream,
// say): the function may go on. Any other error fails the function.
func (x *SubscriptionTx) AppendJSON(path string, body []byte) error {
	return x.ss.appendJSON(x.t, path, body)
}

// Update runs fn as one write function on the store's writer: everything it writes commits
// together, or nothing does. fn may run more than once (a retried commit), so it must start from
// what it reads.
func (ss *SubscriptionStore) Update(ctx context.Context, fn func(x *SubscriptionTx) error) error {
	return ss.k.Write(ctx, func(t *kernel.Tx) error { return fn(&SubscriptionTx{ss: ss, t: t}) })
}

// View runs fn in a read-only transaction: a consistent snapshot of the subscription rows and the
// signing keys.
func (ss *SubscriptionStore) View(ctx context.Context, fn func(q driver.SubscriptionReader) error) error {
	return ss.k.Read(ctx, func(q driver.Reader) error { return fn(q) })
}

// Notify tells the functions registered with Watch that subscription id changed in a way its
// delivery must act on. Call it after the change committed. It never blocks.
func (ss *SubscriptionStore) Notify(id string) { ss.kicks.Notify(id) }

// Watch calls fn with the id given to every later Notify on this store. fn must return at once
// and never block. The returned function stops the watch.
func (ss *SubscriptionStore) Watch(fn func(id string)) (stop func()) { return ss.kicks.Add(fn) }

// WatchChanges calls fn with the path of every stream a later commit changed — any write, by
// this process or (on a shared database) another one; "" means any stream may have changed (a
// notification channel that recovered). fn runs on the writer goroutine or the notification
// listener: it must return at once, never block and never call the store. The returned function
// stops the watch.
func (ss *SubscriptionStore) WatchChanges(fn func(path string)) (stop func()) {
	return ss.k.Changes().Add(fn)
}

// TakeLease takes or renews the driver's lease key for holder, for ttl on the database's clock
// (docs/postgres.md#processors-and-leases); ok reports whether holder has it.
func (ss *SubscriptionStore) TakeLease(ctx context.Context, key, holder string, ttl time.Duration) (ok bool, err error) {
	if ss.k.Closed() {
		return false, kernel.ErrStoreClosed
	}
	l, ok, err := ss.drv.AcquireLease(ctx, key, holder, "", ttl)
	if err != nil || !ok {
		return false, err
	}
	ss.leaseMu.Lock()
	ss.leases[key] = l
	ss.leaseMu.Unlock()
	return true, nil
}

// ReleaseLease gives the lease key up when holder took it last here (a graceful stop), so
// another node takes it at once.
func (ss *SubscriptionStore) ReleaseLease(ctx context.Context, key, holder string) error {
	ss.leaseMu.Lock()
	l, ok := ss.leases[key]
	ss.leaseMu.Unlock()
	if !ok || l.Holder != holder {
		return nil
	}
	if ss.k.Closed() {
		return kernel.ErrStoreClosed
	}
	return ss.drv.ReleaseLease(ctx, l, false)
}

// Exclusive reports whether the store is a file only this process opens, so no other node can
// take a lease over.
func (ss *SubscriptionStore) Exclusive() bool { return ss.drv.Exclusive() }

// Closed reports whether the store is closed.
func (ss *SubscriptionStore) Closed() bool { return ss.k.Closed() }

// Clock is the store's clock.
func (ss *SubscriptionStore) Clock() foldtype.Clock { return ss.clock }

// Logger is the store's logger.
func (ss *SubscriptionStore) Logger() *slog.Logger { return ss.log }

// Config is what a SubscriptionStore needs of the store that opens it.
type Config struct {
	// Clock and Logger are the store's.
	Clock  foldtype.Clock
	Logger *slog.Logger
	// AppendJSON appends body, a JSON array of messages, to the JSON stream at path as one record
	// in the write t, as the protocol face appends (SubscriptionTx.AppendJSON).
	AppendJSON func(t *kernel.Tx, path string, body []byte) error
}

// New returns the subscription face of the store whose kernel is k and whose catalogue is cat.
func New(k *kernel.Store, cat *catalog.Catalog, cfg Config) *SubscriptionStore {
	return &SubscriptionStore{
		k: k, cat: cat, drv: k.Driver(), clock: cfg.Clock, log: cfg.Logger, appendJSON: cfg.AppendJSON,
		leases: map[string]driver.Lease{},
	}
}
