// Command hosted is the program to start from when you run processors in your own service: one
// node.Run (package node, what `foldstream serve` runs) with a durable store (a SQLite file, or
// with -db postgres://… a PostgreSQL database several nodes share; a database not up yet is
// waited for, answering 503 meanwhile), the default host running a processor on every stream
// under /counters/ (one pattern registration; each stream gets its own engine, opened on its first
// append), and the Durable Streams HTTP server with the processor routes, health and metrics, all
// in one process. SIGINT or SIGTERM shut it down in order: requests end, the processors are
// checkpointed and handed over, the store closes.
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
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/node"
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
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// run is the whole wiring: flags, a signal context, one node with one registration.
func run() error {
	addr := flag.String("addr", "127.0.0.1:4438", "listen address")
	db := flag.String("db", "", "SQLite file (default: a temporary directory), or a postgres:// URL shared by several nodes")
	advertise := flag.String("advertise", "", "this node's URL as the other nodes of a cluster reach it (default http://ADDR)")
	demo := flag.Bool("demo", false, "append a few events, print the state and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *db == "" {
		dir, err := os.MkdirTemp("", "foldstream-hosted")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*db = filepath.Join(dir, "foldstream.db")
	}
	n, err := node.Start(ctx, node.Config{DB: *db, Addr: *addr,
		Host: host.Config{Addr: cmp.Or(*advertise, "http://"+*addr)}, // where the other nodes ask for the processors this one runs
		Register: func(ctx context.Context, h *host.Host) error {
			return host.RegisterPattern[State](ctx, h, pattern, Counter{foldstream.NewBase(contract)})
		},
	})
	if err != nil {
		return err
	}
	if *demo {
		return errors.Join(runDemo(ctx, n), n.Shutdown(ctx))
	}
	fmt.Printf("serving http://%s/v1/stream/ and /v1/processor/ (Ctrl-C to stop)\n", n.Addr())
	return n.Wait(ctx) // until SIGINT or SIGTERM, then the shutdown in order
}

// runDemo appends a few ticks through the node's store and prints the counters' states.
func runDemo(ctx context.Context, n *node.Node) error {
	for i, path := range []string{"/counters/a", "/counters/b", "/counters/a"} {
		ev := foldstream.EventInput{Type: "ticked", Payload: foldstream.JSON(Ticked{By: i + 1})}
		if _, err := n.Store().Events().Stream(path).Append(ctx, ev); err != nil {
			return err
		}
	}
	for _, path := range []string{"/counters/a", "/counters/b"} {
		snap, err := n.Host().Snapshot(ctx, path, contract.Slug())
		if err != nil {
			return err
		}
		fmt.Printf("counter on %s through offset %d: %s\n", path, snap.Offset, snap.State)
	}
	return nil
}
