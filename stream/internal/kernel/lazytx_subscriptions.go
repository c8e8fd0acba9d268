package kernel

import (
	"context"

	"github.com/foldstream/foldstream/stream/driver"
)

// The statements of driver.Tx the subscription store writes with, on a write function's lazy
// transaction (lazytx.go), forwarded like every statement.

func (l lazyTx) Subscription(ctx context.Context, id string) (driver.SubscriptionRow, bool, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return driver.SubscriptionRow{}, false, err
	}
	return d.Subscription(ctx, id)
}

func (l lazyTx) Subscriptions(ctx context.Context) ([]driver.SubscriptionRow, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.Subscriptions(ctx)
}

func (l lazyTx) SigningKeys(ctx context.Context) ([]driver.SigningKey, error) {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	return d.SigningKeys(ctx)
}

func (l lazyTx) LockSubscription(ctx context.Context, id string) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.LockSubscription(ctx, id)
}

func (l lazyTx) PutSubscription(ctx context.Context, r driver.SubscriptionRow) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.PutSubscription(ctx, r)
}

func (l lazyTx) DeleteSubscription(ctx context.Context, id string) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.DeleteSubscription(ctx, id)
}

func (l lazyTx) PutSigningKey(ctx context.Context, k driver.SigningKey) error {
	d, ctx, err := l.begin(ctx)
	if err != nil {
		return err
	}
	return d.PutSigningKey(ctx, k)
}
