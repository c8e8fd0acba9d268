// Command pgonly opens a stream store on the PostgreSQL database named by its first argument
// (pgdriver.Open, then stream.OpenDriver). storeopen's tests list its dependencies to prove it
// does not link SQLite.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

func main() {
	ctx := context.Background()
	d, err := pgdriver.Open(ctx, pgdriver.Config{URL: os.Args[1]})
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
