// Package subscriptions is the Durable Streams protocol's reserved subscription APIs apart from
// HTTP (docs/server.md#subscriptions): a subscription's configuration and how it matches stream
// paths, its state machine over the store's transactions (links, wakes, generations, leases,
// acks, claims), the webhook signing keys and wake tokens, the webhook URL rules, the retry
// policy, and the delivery loop that sends the webhooks.
//
// [Store] is the calls the protocol's routes make, each one transaction of the stream store's
// writer through its subscription face (stream.Store.Subscriptions); package server maps them to
// HTTP. [StartDelivery] runs a node's delivery loop beside its host (package node starts it): on a
// shared database only the node holding the delivery lease issues wakes for appends and sends
// webhooks. Patterns are foldstream's one path-glob grammar, the one processor patterns use too
// (docs/store.md#path-patterns).
//
// Paths here are stream-root-relative ("events/abc"), as the protocol writes them; the store path
// is "/" + that. Refusals are coded *foldtype.Error values (BAD_REQUEST, CONFLICT,
// SUBSCRIPTION_NOT_FOUND, UNAUTHORIZED, FENCED, ALREADY_CLAIMED, WEBHOOK_URL_REJECTED).
package subscriptions
