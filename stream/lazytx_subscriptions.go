package stream

import (
	"context"

	"github.com/foldstream/foldstream/stream/driver"
)

func (l lazyTx) Subscription(ctx context.Context, id string) (driver.SubscriptionRow, bool, error) {
	d, err := l.t.begin()
	if err != nil {
		return driver.SubscriptionRow{}, false, err
	}
	return d.Subscription(l.t.stmtCtx(ctx), id)
}

func (l lazyTx) Subscriptions(ctx context.Context) ([]driver.SubscriptionRow, error) {
	d, err := l.t.begin()
	if err != nil {
		return nil, err
	}
	return d.Subscriptions(l.t.stmtCtx(ctx))
}

func (l lazyTx) SigningKeys(ctx context.Context) ([]driver.SigningKey, error) {
	d, err := l.t.begin()
	if err != nil {
		return nil, err
	}
	return d.SigningKeys(l.t.stmtCtx(ctx))
}

func (l lazyTx) LockSubscription(ctx context.Context, id string) error {
	d, err := l.t.begin()
	if err != nil {
		return err
	}
	return d.LockSubscription(l.t.stmtCtx(ctx), id)
}

func (l lazyTx) PutSubscription(ctx context.Context, r driver.SubscriptionRow) error {
	d, err := l.t.begin()
	if err != nil {
		return err
	}
	return d.PutSubscription(l.t.stmtCtx(ctx), r)
}

func (l lazyTx) DeleteSubscription(ctx context.Context, id string) error {
	d, err := l.t.begin()
	if err != nil {
		return err
	}
	return d.DeleteSubscription(l.t.stmtCtx(ctx), id)
}

func (l lazyTx) PutSigningKey(ctx context.Context, k driver.SigningKey) error {
	d, err := l.t.begin()
	if err != nil {
		return err
	}
	return d.PutSigningKey(l.t.stmtCtx(ctx), k)
}
