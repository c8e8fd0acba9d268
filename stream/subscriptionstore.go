package stream

import "github.com/foldstream/foldstream/stream/internal/substore"

// The subscription face is package stream/internal/substore; the names below are aliases of its
// types, so a caller sees one package, stream.

// SubscriptionStore is the store's subscription face: the transactional primitives package
// subscriptions builds the protocol's reserved subscription APIs on
// (docs/server.md#the-subscriptions-package), [substore.SubscriptionStore]. Take it with
// [Store.Subscriptions]; it is safe for concurrent use and valid until the store closes.
type SubscriptionStore = substore.SubscriptionStore

// SubscriptionTx is one write function's access to subscriptions (see
// [SubscriptionStore.Update]). It is valid only inside that function.
type SubscriptionTx = substore.SubscriptionTx

// StreamRef is what a subscription knows of a stream it links: its store path, its identity (a
// stream created again at a path gets a new one) and its tail.
type StreamRef = substore.StreamRef

// Subscriptions returns the store's subscription face.
func (s *Store) Subscriptions() *SubscriptionStore { return s.subs }
