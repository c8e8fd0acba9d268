package stream

import (
	"context"
	"fmt"

	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// openPostgres opens a store on the PostgreSQL database named by url (postgres://…): the driver
// of package pgdriver, shared by every node given the same URL (docs/postgres.md).
func openPostgres(url string, opts Options) (*Store, error) {
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("open stream store: %w", err)
	}
	s, err := OpenDriver(ctx, d, opts)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store: %w", err)
	}
	s.path = pgdriver.Redacted(url)
	return s, nil
}
