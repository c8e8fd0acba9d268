package stream

import (
	"context"

	"github.com/foldstream/foldstream/stream/internal/protocol"
)

// Events is the store's event face: what a processor engine and the host that runs engines need
// (docs/store.md#the-two-faces). Take it with [Store.Events]; it is safe for concurrent use and
// valid until the store closes.
//
// It offers, over the same streams the protocol face serves:
//
//   - [Events.Stream]: one path's [EventStream], the [foldtype.Stream] an engine runs against
//     (Append, Read, and with ForProcessor a processor's Claim);
//   - [Events.Subscribe]: commit-ordered pushes whose ranges chain with no gap;
//   - [Events.Checkpoints]: the processors' checkpoints, written through the writer;
//   - claims and alarms ([Events.Claim], [Events.Claims], [Events.StartAlarms]);
//   - [Events.Wake] and [Events.WakeExisting]: the store's wake record that starts processors;
//   - watching ([Events.WatchCommits], [Events.OnStreamCreated]) and the append-time schema check
//     ([Events.SetAppendCheck]);
//   - the catalogue ([Events.HeadStream], [Events.ListStreams]), shared with the protocol face.
//
// Its rules are the store's (see [Store]): a write returns after its commit, a refusal is a coded
// *foldtype.Error, and a deleted stream's events, checkpoints and claims never reach a stream
// created again at its path.
type Events struct{ s *Store }

// Protocol is the store's protocol face: the Durable Streams operations that package server maps
// to HTTP (docs/store.md#the-two-faces), package stream/internal/protocol. Take it with
// [Store.Protocol]; it is safe for concurrent use and valid until the store closes.
type Protocol = protocol.Protocol

// Events returns the store's event face.
func (s *Store) Events() *Events { return s.events }

// Protocol returns the store's protocol face.
func (s *Store) Protocol() *Protocol { return s.protocol }

// HeadStream returns a stream's metadata, as [Protocol.HeadStream] does: whether it is live, its
// tail, its incarnation (CreatedMs) and its pause state. It never renews a TTL.
func (e *Events) HeadStream(ctx context.Context, path string) (StreamInfo, error) {
	return e.s.cat.HeadStream(ctx, path)
}

// ListStreams lists live streams by path (the same as [Protocol.ListStreams]).
func (e *Events) ListStreams(ctx context.Context, opts ListOptions) ([]StreamInfo, error) {
	return e.s.cat.ListStreams(ctx, opts)
}

// WatchCommits calls fn with the path of every later commit that lands durable events (or
// event-shaped messages) on any stream, after the commit's subscribers were offered it; commits of
// ephemeral events only (live-state deltas among them) are not reported. On a shared database fn
// also hears of every commit another node announced (docs/postgres.md#live-reads), whether or not
// this node reads the stream — possibly of an ephemeral-only one, and before this node's
// subscribers got its events — and is called with the empty path when notifications may have been
// missed (the listener reconnected): anything may have changed. fn runs on the writer or the
// listener goroutine: it must return at once, never block and never call the store. The returned
// function stops the watch (a commit already landing may still call fn once).
func (e *Events) WatchCommits(fn func(path string)) (stop func()) { return e.s.k.Landed().Add(fn) }
