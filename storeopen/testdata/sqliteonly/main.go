// Command sqliteonly opens a stream store on a SQLite file the documented way for a program that
// never opens PostgreSQL (sqlitedriver.Open, then stream.OpenDriver). storeopen's tests list its
// dependencies to prove it does not link the PostgreSQL client.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

func main() {
	ctx := context.Background()
	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: ":memory:"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	st, err := stream.OpenDriver(ctx, d, stream.Config{})
	if err != nil {
		d.Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	st.Close(ctx)
}
