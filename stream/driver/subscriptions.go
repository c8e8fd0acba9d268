package driver

import "context"

// Subscriptions (docs/server.md#subscriptions): the durable rows behind the protocol's reserved
// subscription APIs. A row holds a subscription's configuration and its state (stream links with
// their acked offsets, the wake in flight, the lease, the webhook retry schedule) as JSON the
// store writes and reads; the driver stores both as opaque bytes. Webhook signing keys live beside
// them, so every node of a shared database signs with and publishes the same keys.

// SubscriptionReader is what read and write transactions offer about subscriptions.
type SubscriptionReader interface {
	// Subscription returns the subscription row with id, and false when there is none.
	Subscription(ctx context.Context, id string) (SubscriptionRow, bool, error)
	// Subscriptions returns every subscription row, in byte-wise id order.
	Subscriptions(ctx context.Context) ([]SubscriptionRow, error)
	// SigningKeys returns every webhook signing key, oldest first.
	SigningKeys(ctx context.Context) ([]SigningKey, error)
}

// SubscriptionTx is the write side of subscriptions.
type SubscriptionTx interface {
	// LockSubscription serialises writers of subscription id across processes until the
	// transaction ends (shared databases: a transaction-scoped advisory lock, taken before the
	// function writes anything, like LockStream). Exclusive drivers may do nothing. The store
	// takes it before reading a row it is going to change.
	LockSubscription(ctx context.Context, id string) error
	// PutSubscription inserts or replaces the row with r.ID.
	PutSubscription(ctx context.Context, r SubscriptionRow) error
	// DeleteSubscription removes the row with id (no error when there is none).
	DeleteSubscription(ctx context.Context, id string) error
	// PutSigningKey inserts or replaces the signing key with k.KID.
	PutSigningKey(ctx context.Context, k SigningKey) error
}

// SubscriptionRow is one stored subscription. Config and State are the store's JSON.
type SubscriptionRow struct {
	ID     string
	Config []byte
	State  []byte
}

// SigningKey is one webhook signing key: an Ed25519 seed (32 bytes; the private key) named by
// KID. RetiredMs is 0 for the active key, else when it stopped signing (it is still published so
// deliveries signed with it verify).
type SigningKey struct {
	KID       string
	CreatedMs int64
	Seed      []byte
	RetiredMs int64
}
