package pgdriver_test

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/drivertest"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// TestDriver runs the shared driver suite against PostgreSQL, one fresh schema per subtest.
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Driver {
		d, err := pgdriver.Open(context.Background(), pgdriver.Config{URL: pgtest.URL(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}
