// Command hosted is the program to start from when you run processors in your own service: a
// durable store (a SQLite file, or with -db postgres://… a PostgreSQL database several nodes
// share), the default host running a processor on every stream under /counters/ (one pattern
// registration; each stream gets its own engine, opened on its first append), and the Durable
// Streams HTTP server with the processor routes, all in one process.
//
//	go run ./examples/hosted            # serves on 127.0.0.1:4438 until Ctrl-C
//	go run ./examples/hosted -demo      # appends a few events itself, prints the state, exits
//
// Several nodes on one PostgreSQL database (docs/postgres.md) run the same program unchanged: each
// stream's counter runs on one node at a time, under a lease, and moves to another node when its
// node stops or dies; every node answers every processor read:
//
//	go run ./examples/hosted -db "$DB" -addr 127.0.0.1:4438
//	go run ./examples/hosted -db "$DB" -addr 127.0.0.1:4439
//
// With the server running, write events over HTTP to any stream under counters/ (through any
// node) and read the processor:
//
//	curl -X POST -H 'Content-Type: application/json' \
//	     --data '{"type":"ticked","payload":{"by":2}}' http://127.0.0.1:4438/v1/stream/counters/a
//	curl 'http://127.0.0.1:4438/v1/processor/counter/counters/a'
//	curl -N 'http://127.0.0.1:4438/v1/processor/counter/counters/a?live=sse'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
)

// Ticked is the payload of a "ticked" event.
type Ticked struct {
	By int `json:"by" jsonschema:"minimum=1"`
}

// State is the counter's reduced state.
type State struct {
	Ticks int `json:"ticks"`
}

var contract = foldstream.MustDefineContract(foldstream.ContractConfig[State]{
	Slug:        "counter",
	Version:     "1",
	Description: "sums the ticks of a stream",
	Consumes:    []string{"ticked"},
	Events:      []foldstream.EventDefinition{foldstream.DefineEvent[Ticked]("ticked", "the counter ticked")},
})

// Counter is the processor.
type Counter struct{ foldstream.Base[State] }

// Reduce adds the tick's increment.
func (Counter) Reduce(a foldstream.ReduceArgs[State]) (State, bool, error) {
	return State{Ticks: a.State.Ticks + a.Payload.(Ticked).By}, true, nil
}

// pattern covers every stream one segment below /counters (see host.Pattern).
const pattern = "/counters/*"

func main() {
	addr := flag.String("addr", "127.0.0.1:4438", "listen address")
	db := flag.String("db", "", "SQLite file (default: a temporary directory), or a postgres:// URL shared by several nodes")
	advertise := flag.String("advertise", "", "this node's URL as the other nodes of a cluster reach it (default http://ADDR)")
	demo := flag.Bool("demo", false, "append a few events, print the state and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *advertise == "" {
		*advertise = "http://" + *addr
	}
	if err := run(ctx, *addr, *db, *advertise, *demo); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr, dbPath, advertise string, demo bool) error {
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "foldstream-hosted")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "foldstream.db")
	}
	st, err := storeopen.Open(context.Background(), dbPath, storeopen.Config{})
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(context.Background()); err != nil {
			log.Printf("close the store: %v", err)
		}
	}()

	// advertise is where the other nodes of a cluster ask this node for the processors it runs.
	h, err := host.New(st, host.Config{Addr: advertise})
	if err != nil {
		return err
	}
	// One registration for every stream under /counters/: each gets its own engine, opened on
	// its first append (host.Pattern has the syntax).
	if err := host.RegisterPattern[State](ctx, h, pattern, Counter{foldstream.NewBase(contract)}); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.Shutdown(sctx); err != nil {
			log.Printf("host shutdown: %v", err)
		}
	}()

	if demo {
		for i, path := range []string{"/counters/a", "/counters/b", "/counters/a"} {
			ev := foldstream.EventInput{Type: "ticked", Payload: foldstream.JSON(Ticked{By: i + 1})}
			if _, err := st.Events().Stream(path).Append(ctx, ev); err != nil {
				return err
			}
		}
		for _, path := range []string{"/counters/a", "/counters/b"} {
			snap, err := h.Snapshot(ctx, path, contract.Slug())
			if err != nil {
				return err
			}
			fmt.Printf("counter on %s through offset %d: %s\n", path, snap.Offset, snap.State)
		}
		return nil
	}

	handler, err := server.New(st, server.Config{Processors: h})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("serving http://%s/v1/stream/ and /v1/processor/ (Ctrl-C to stop)\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Printf("server shutdown: %v", err)
		}
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
