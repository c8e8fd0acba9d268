// Package feeds is the event face's push side (docs/store.md#the-kernel-and-its-layers): the
// subscriptions that push each commit to their subscribers in commit order (subscribe.go), the
// per-stream feeds that keep those pushes gapless on a shared database (feed.go) and the ring
// of recent ephemeral events that reads merge in (ring.go). It calls only down: the kernel for
// its reads, its goroutines and the notifications of other processes' commits, which it
// registers to hear (kernel.Store.OnRemoteCommit), and the catalogue for the decoding of a
// stored message into an event. What the event face reads for it, a feed's catch-up, the face
// hands it as a function ([Config.ReadDurable]).
package feeds

import (
	"container/list"
	"context"
	"log/slog"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Config is what a Hub needs of the store that opens it.
type Config struct {
	// Clock times a feed's retries after a failed catch-up read.
	Clock foldtype.Clock
	// Logger receives the warnings of feeds and subscriptions.
	Logger *slog.Logger
	// MaxEphemeralBytes bounds what the ephemeral rings of all streams hold together.
	MaxEphemeralBytes int
	// Exclusive is the driver's: only this process writes the database, so no feed is needed.
	Exclusive bool
	// ReadDurable reads the durable events of the stream at path after an offset, one page, as
	// the event face reads them; a feed catches up through it on a shared database.
	ReadDurable func(ctx context.Context, path string, after int64) (foldtype.ReadPage, error)
}

// Hub is one store's subscriptions, feeds and ephemeral rings. Its methods are safe for
// concurrent use.
type Hub struct {
	k           *kernel.Store
	clock       foldtype.Clock
	log         *slog.Logger
	exclusive   bool
	readDurable func(ctx context.Context, path string, after int64) (foldtype.ReadPage, error)

	ringMu    sync.Mutex
	rings     map[int64]*ephemeralRing
	ringLRU   *list.List // *ephemeralRing, most recently appended first
	ringTotal int        // bytes all rings hold
	ringMax   int        // Config.MaxEphemeralBytes

	subsMu  sync.RWMutex
	subs    map[string][]*Subscription
	closing bool // set under subsMu by Halt; no subscription starts after it

	feeds feedSet // order publishing on a shared database (feed.go)
}

// New returns the hub of the store whose kernel is k, registered with the kernel to hear every
// other process's commit (feed.go). Call it while the store opens, before its listener starts.
func New(k *kernel.Store, cfg Config) *Hub {
	h := &Hub{
		k:           k,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		exclusive:   cfg.Exclusive,
		readDurable: cfg.ReadDurable,
		rings:       make(map[int64]*ephemeralRing),
		ringLRU:     list.New(),
		ringMax:     cfg.MaxEphemeralBytes,
		subs:        make(map[string][]*Subscription),
	}
	h.useFeeds()
	return h
}

// Halt is the hub's part in the store's Close: no subscription, feed catch-up or goroutine
// started through [Hub.Go] starts after it.
func (h *Hub) Halt() {
	h.subsMu.Lock()
	h.closing = true
	h.subsMu.Unlock()
}

// Go runs fn on a goroutine that the store's Close waits for, unless the hub was halted; it
// reports whether fn runs. The event face's stream-created listeners start this way, so that
// none starts after Close began.
func (h *Hub) Go(fn func()) bool {
	h.subsMu.Lock()
	if h.closing {
		h.subsMu.Unlock()
		return false
	}
	h.k.Background().Add(1) // under subsMu before closing is set, so Close waits for this goroutine
	h.subsMu.Unlock()
	go func() {
		defer h.k.Background().Done()
		fn()
	}()
	return true
}

// EventBytes estimates an event's size for the ephemeral ring and pending budgets.
func EventBytes(ev foldtype.Event) int {
	return len(ev.Type) + len(ev.Payload) + len(ev.Metadata) + len(ev.IdempotencyKey) + len(ev.Path) + 64
}
