package sqlitedriver_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/drivertest"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Driver {
		d, err := sqlitedriver.Open(context.Background(), sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "s.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// Every read connection in a transaction that runs a query for the first time: preparing it must
// not wait for a free connection while holding one (that deadlocked once all were so held).
func TestReadsOnEveryConnectionRunNewQueriesAtOnce(t *testing.T) {
	ctx := context.Background()
	const conns = 2
	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "s.db"), ReadConns: conns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		inside := make(chan struct{}, conns)
		all := make(chan struct{})
		done := make(chan error, conns)
		for range conns {
			go func() {
				done <- d.Read(ctx, func(q driver.Reader) error {
					inside <- struct{}{}
					<-all // every connection is in a transaction now
					_, err := q.StreamByPath(ctx, "/none")
					if err != driver.ErrNoStream {
						return err
					}
					_, err = q.StreamByID(ctx, 42)
					if err != driver.ErrNoStream {
						return err
					}
					return nil
				})
			}()
		}
		for range conns {
			<-inside
		}
		close(all)
		for range conns {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: reads on every connection did not finish", round)
			}
		}
	}
}
