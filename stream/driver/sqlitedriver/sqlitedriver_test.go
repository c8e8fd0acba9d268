package sqlitedriver_test

import (
	"context"
	"path/filepath"
	"testing"

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
