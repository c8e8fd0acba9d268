// Command node is one foldstream node of the multi-node tests: a store on PostgreSQL, a host with a
// leased counter processor (host/cluster), and the HTTP server, in one process. It prints
// "serving http://ADDR" once it listens and runs until SIGTERM (or dies by SIGKILL).
//
// The counter reduces "ticked" events and, for each one, emits an "effect" event keyed by the
// ticked event (an idempotency key), so a test can check every event's effect landed exactly once
// however often the processor moved between nodes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/host/cluster"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// Ticked is the payload of a "ticked" event.
type Ticked struct {
	By int `json:"by"`
	N  int `json:"n"`
}

// Effect is the payload of the "effect" event emitted once per ticked event.
type Effect struct {
	Of int64 `json:"of"`
}

// State is the counter's reduced state.
type State struct {
	Ticks  int   `json:"ticks"`
	Events int   `json:"events"`
	Last   int64 `json:"last"`
}

var contract = foldstream.MustDefineContract(foldstream.ContractConfig[State]{
	Slug:     "counter",
	Version:  "1",
	Consumes: []string{"ticked"},
	Emits:    []string{"effect"},
	Events: []foldstream.EventDefinition{
		foldstream.DefineEvent[Ticked]("ticked", "the counter ticked"),
		foldstream.DefineEvent[Effect]("effect", "the side effect of one tick"),
	},
})

// Counter sums ticks and emits one effect per tick.
type Counter struct{ foldstream.Base[State] }

// Reduce adds the tick.
func (Counter) Reduce(a foldstream.ReduceArgs[State]) (State, bool, error) {
	t := a.Payload.(Ticked)
	return State{Ticks: a.State.Ticks + t.By, Events: a.State.Events + 1, Last: a.Event.Offset}, true, nil
}

// ProcessEvent emits the tick's effect, keyed by the tick, before the cursor moves past it.
func (c Counter) ProcessEvent(a *foldstream.ProcessEventArgs[State]) error {
	if a.Event == nil {
		return nil
	}
	ev := a.Event
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldstream.EventInput{Type: "effect", Payload: foldstream.JSON(Effect{Of: ev.Offset}),
			IdempotencyKey: c.IdempotencyKey("effect", ev)})
		return err
	})
	return nil
}

func main() {
	db := flag.String("db", os.Getenv("FOLDSTREAM_TEST_POSTGRES"), "PostgreSQL URL")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	ttl := flag.Duration("lease-ttl", 2*time.Second, "processor lease time")
	path := flag.String("stream", "/counters/a", "stream the counter runs on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *addr, *path, *ttl); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, db, addr, path string, ttl time.Duration) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	drv, err := pgdriver.Open(ctx, pgdriver.Config{URL: db, Logger: logger, PollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	st, err := stream.OpenDriver(ctx, drv, stream.Options{Logger: logger})
	if err != nil {
		drv.Close()
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h, err := host.New(st, host.Config{Logger: logger})
	if err != nil {
		return err
	}
	c, err := cluster.New(h, cluster.Config{Driver: drv, Addr: "http://" + ln.Addr().String(), LeaseTTL: ttl, Logger: logger})
	if err != nil {
		return err
	}
	if err := cluster.Register[State](c, path, Counter{foldstream.NewBase(contract)}); err != nil {
		return err
	}
	srv := &http.Server{Handler: server.New(st, server.Config{Processors: c, Logger: logger}), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("serving http://%s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Shutdown(sctx)
		_ = h.Shutdown(sctx)
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
