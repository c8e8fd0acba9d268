package stream

import "github.com/foldstream/foldstream/stream/internal/feeds"

// Subscriptions push each commit to their subscribers in commit order, with ranges that chain
// with no gap (docs/store.md#subscriptions). They are package stream/internal/feeds, with the
// feeds that keep their pushes gapless on a shared database and the rings of recent ephemerals;
// the names below are aliases of its, so a caller sees one package, stream.

// DefaultMaxPendingEvents is the default bound on events queued for one subscriber.
const DefaultMaxPendingEvents = feeds.DefaultMaxPendingEvents

// DeliverFunc receives one push: the consumed events of one or more commits and the range they
// prove contiguous ([feeds.DeliverFunc]). An error is logged, a panic recovered and logged; the
// next push still chains from this range, so a receiver that failed heals from the log.
type DeliverFunc = feeds.DeliverFunc

// SubscribeOptions configures a subscription ([feeds.SubscribeOptions]).
type SubscribeOptions = feeds.SubscribeOptions

// Subscription is one subscriber's push chain on one stream path ([feeds.Subscription]).
type Subscription = feeds.Subscription

// ErrSubscriptionClosed is the end of a subscription closed by its owner or by the store's
// Close ([feeds.ErrSubscriptionClosed]).
var ErrSubscriptionClosed = feeds.ErrSubscriptionClosed

// EphemeralRingBytes bounds the per-stream ring of recent ephemeral events that reads including
// ephemerals merge in (docs/store.md#appending: 1 MiB, oldest dropped first; an ephemeral larger
// than the bound is kept alone).
const EphemeralRingBytes = feeds.EphemeralRingBytes

// DefaultMaxEphemeralBytes is the default of Config.MaxEphemeralBytes: what all streams' rings
// hold together.
const DefaultMaxEphemeralBytes = feeds.DefaultMaxEphemeralBytes

// Subscribe starts pushing every later commit on the stream at path to deliver, filtered by
// opts.Consumes. The stream need not exist yet. Close the subscription to stop it; [Store.Close]
// stops every subscription.
func (e *Events) Subscribe(path string, deliver DeliverFunc, opts SubscribeOptions) (*Subscription, error) {
	return e.s.pushes.Subscribe(path, deliver, opts)
}
