package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/node"
)

type Ticked struct {
	By int `json:"by" jsonschema:"minimum=1"`
}

type State struct {
	Ticks int `json:"ticks"`
}

var contract = foldstream.MustDefineContract(foldstream.ContractConfig[State]{
	Slug:     "counter",
	Version:  "1",
	Consumes: []string{"ticked"},
	Events:   []foldstream.EventDefinition{foldstream.DefineEvent[Ticked]("ticked", "the counter ticked")},
})

type Counter struct{ foldstream.Base[State] }

func (Counter) Reduce(a foldstream.ReduceArgs[State]) (State, bool, error) {
	return State{Ticks: a.State.Ticks + a.Payload.(Ticked).By}, true, nil
}

// A program hosts its processor with one node: a store, a counter on every stream under
// /counters/, the HTTP server. A real program calls node.Run with a ctx that SIGINT and SIGTERM
// end (signal.NotifyContext); here the node is started, asked over HTTP, and shut down.
func Example() {
	dir, _ := os.MkdirTemp("", "node-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	n, err := node.Start(ctx, node.Config{
		DB:     filepath.Join(dir, "foldstream.db"), // or a postgres:// URL several nodes share
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Register: func(ctx context.Context, h *host.Host) error {
			return host.RegisterPattern[State](ctx, h, "/counters/*", Counter{foldstream.NewBase(contract)})
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Shutdown(ctx) // requests end, the counters are handed over, the store closes

	base := "http://" + n.Addr().String()
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/stream/counters/a", nil)
	req.Header.Set("Content-Type", "application/json")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		fmt.Println("create:", res.Status)
	}
	for _, by := range []int{2, 3} {
		res, err := http.Post(base+"/v1/stream/counters/a", "application/json", strings.NewReader(fmt.Sprintf(`{"type":"ticked","payload":{"by":%d}}`, by)))
		if err != nil {
			fmt.Println(err)
			return
		}
		res.Body.Close()
		fmt.Println("append:", res.Status)
	}
	res, err := http.Get(base + "/v1/processor/counter/counters/a") // read-your-writes
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	var snap struct{ State State }
	_ = json.NewDecoder(res.Body).Decode(&snap)
	fmt.Println("ticks:", snap.State.Ticks)
	// Output:
	// create: 201 Created
	// append: 204 No Content
	// append: 204 No Content
	// ticks: 5
}
