// Command node is one foldstream node of the host's multi-node tests, built only from the
// documented pieces: a store opened from a postgres:// URL (storeopen.Open), host.New, one
// host.RegisterPattern, and server.New. It prints "serving http://ADDR" once it listens and runs
// until SIGTERM (or dies by SIGKILL).
//
// The counter reduces "ticked" events on every stream under /counters/ and, for each one, calls
// an external side effect (an HTTP POST to -effects naming the node, stream and offset, which the
// test counts) and emits an "effect" event keyed by the ticked event (an idempotency key). With
// -poison-file, a ticked event marked poison fails its ProcessEvent while that file exists (the
// cause an operator fixes by removing it).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/subscriptions"
)

// Ticked is the payload of a "ticked" event.
type Ticked struct {
	By     int  `json:"by"`
	N      int  `json:"n"`
	Poison bool `json:"poison,omitempty"`
}

// Effect is the payload of the "effect" event emitted once per ticked event.
type Effect struct {
	Of int64 `json:"of"`
	N  int   `json:"n"`
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

// Counter sums ticks, calls the external effect and emits one effect event per tick.
type Counter struct {
	foldstream.Base[State]
	node    string
	effects string
	hc      *http.Client
	h       **host.Host
	gens    *generations
	poison  string // a file whose existence makes poison ticks fail
}

// generations is the lease generation each stream's counter last ran under on this node.
type generations struct {
	mu sync.Mutex
	m  map[string]int64
}

// Reduce adds the tick.
func (Counter) Reduce(a foldstream.ReduceArgs[State]) (State, bool, error) {
	t := a.Payload.(Ticked)
	return State{Ticks: a.State.Ticks + t.By, Events: a.State.Events + 1, Last: a.Event.Offset}, true, nil
}

// ProcessEvent runs the tick's effects before the cursor moves past it.
func (c Counter) ProcessEvent(a *foldstream.ProcessEventArgs[State]) error {
	if a.Event == nil {
		return nil
	}
	ev := a.Event
	var tick Ticked
	_ = json.Unmarshal(ev.Payload, &tick)
	if tick.Poison && c.poison != "" {
		if _, err := os.Stat(c.poison); err == nil {
			return fmt.Errorf("tick %d of %s is poison while %s exists", tick.N, ev.Path, c.poison)
		}
	}
	a.BlockProcessorWhile(func(ctx context.Context) error {
		// When the work of the effect began, on this machine's clock: the test judges a run by
		// when it began (a run begun before a fault was in flight at it).
		start := time.Now()
		if c.effects != "" {
			// The lease generation this node runs the processor under, as the host reports it.
			var gen int64
			for _, st := range (*c.h).ProcessorsOn(ctx, ev.Path) {
				if st.Slug == contract.Slug() && st.Local {
					gen = st.Generation
				}
			}
			// The host reports the processor here for as long as this node holds its lease (while
			// it shuts down too). An engine finishing an event after its lease ran out is the one
			// that ran under the generation last reported.
			c.gens.mu.Lock()
			if gen != 0 {
				c.gens.m[ev.Path] = gen
			} else {
				gen = c.gens.m[ev.Path]
			}
			c.gens.mu.Unlock()
			body, _ := json.Marshal(map[string]any{"node": c.node, "path": ev.Path, "offset": ev.Offset, "n": tick.N, "generation": gen,
				"start": start.UnixNano()})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.effects, bytes.NewReader(body))
			if err != nil {
				return err
			}
			// A service outside the store gets the effect key, unique across streams
			// (docs/engine.md#effect-keys); IdempotencyKey below keys the emit within the stream.
			req.Header.Set("Idempotency-Key", c.EffectKey("effect", ev))
			resp, err := c.hc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
		}
		_, err := a.Append(ctx, foldtype.EventInput{Type: "effect", Payload: foldtype.JSON(Effect{Of: ev.Offset, N: tick.N}),
			IdempotencyKey: c.IdempotencyKey("effect", ev)})
		return err
	})
	return nil
}

func main() {
	db := flag.String("db", os.Getenv("FOLDSTREAM_TEST_POSTGRES"), "PostgreSQL URL")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	ttl := flag.Duration("lease-ttl", 0, "processor lease time (0: the host's default)")
	advertise := flag.Bool("advertise", false, "set host.Config.Addr (reads are asked of the owner)")
	effects := flag.String("effects", "", "URL the side effect posts to")
	name := flag.String("name", "", "node name in the effect calls")
	debug := flag.Bool("debug", false, "log at debug level (the hand-over's steps)")
	poison := flag.String("poison-file", "", "poison ticks fail while this file exists")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// FOLDSTREAM_NODE_STACKS=dir: SIGUSR1 writes every goroutine's stack to a file in dir (where a
	// stalled node waits; the test goes on).
	if dir := os.Getenv("FOLDSTREAM_NODE_STACKS"); dir != "" {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			for range usr1 {
				f, err := os.Create(fmt.Sprintf("%s/stacks-%d-%d.txt", dir, os.Getpid(), time.Now().UnixMilli()))
				if err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 2)
					f.Close()
				}
			}
		}()
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	if err := run(ctx, *db, *addr, *name, *effects, *poison, *ttl, *advertise, level); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, db, addr, name, effects, poison string, ttl time.Duration, advertise bool, level slog.Level) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// As the node runtime does (package node): a transaction idle past the lease is ended by the
	// database, so a frozen node's locks never outlast its leases.
	pg := pgdriver.Config{}
	if ttl > 0 {
		pg.IdleInTransactionTimeout = min(ttl, pgdriver.DefaultIdleInTransactionTimeout)
	}
	st, err := storeopen.Open(ctx, db, storeopen.Config{Store: stream.Config{Logger: logger}, Postgres: pg})
	if err != nil {
		return err
	}
	defer st.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	cfg := host.Config{Logger: logger, LeaseTTL: ttl}
	if advertise {
		cfg.Addr = "http://" + ln.Addr().String()
	}
	h, err := host.New(st, cfg)
	if err != nil {
		return err
	}
	c := Counter{Base: foldstream.NewBase(contract), node: name, effects: effects, hc: &http.Client{Timeout: 10 * time.Second}, h: &h,
		gens: &generations{m: map[string]int64{}}, poison: poison}
	if err := host.RegisterPattern[State](ctx, h, "/counters/*", c); err != nil {
		return err
	}
	// Subscriptions: the node names itself as holder of the delivery lease, whose TTL is the
	// processors' lease TTL, and may deliver to the test's loopback receivers.
	scfg := server.Config{Processors: h, Logger: logger, AllowLoopbackWebhooks: true}
	handler, err := server.New(st, scfg)
	if err != nil {
		return err
	}
	delivery := subscriptions.StartDelivery(st, subscriptions.DeliveryConfig{NodeID: name, LeaseTTL: ttl, AllowLoopbackWebhooks: true, Logger: logger})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("serving http://%s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		start := time.Now()
		if err := h.Shutdown(sctx); err != nil {
			logger.Error("host shutdown", "err", err, "after", time.Since(start))
		} else {
			logger.Info("host shut down", "after", time.Since(start))
		}
		_ = srv.Shutdown(sctx)
		_ = delivery.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
