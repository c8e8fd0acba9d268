package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// syncBuffer is a log sink that handlers write to from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type cutOffCount struct {
	N int `json:"n"`
}

// leakWords are what no answer may carry while the database is cut off: the database's addresses
// (the proxy's and the server's) and ports are added per test; these name the database, its
// driver, the connection attempt and the Go packages behind the answer.
var leakWords = []string{"postgres", "pgx", "pgconn", "pgdriver", "sqlitedriver", "dial", "failed to connect",
	"connection refused", "user=", "search_path", "github.com/", "foldstream/", "stream store", "host: ", "stream: ",
	"goroutine", ".go:", "preprocessing", "unexpected eof", "queued statement", "write transaction", "broken pipe",
	"connection reset", "eof"}

// cutOffRequest is one request of the cut-off test; headers are name, value pairs.
type cutOffRequest struct {
	name, method, url, body string
	headers                 []string
}

// cutOffRequests are the requests the cut-off test sends: every route a client takes.
func cutOffRequests(base string) []cutOffRequest {
	type rq = cutOffRequest
	js := []string{"Content-Type", "application/json"}
	return []rq{
		{"create", "PUT", base + "/v1/stream/orders/new", "", js},
		{"create with a body", "PUT", base + "/v1/stream/orders/new2", `{"type":"order"}`, js},
		{"create again", "PUT", base + "/v1/stream/orders/a", "", js},
		{"create with a TTL", "PUT", base + "/v1/stream/orders/ttl", "", append([]string{"Stream-TTL", "3600"}, js...)},
		{"fork", "PUT", base + "/v1/stream/orders/fork", "", append([]string{"Stream-Forked-From", "/v1/stream/orders/a"}, js...)},
		{"append", "POST", base + "/v1/stream/orders/a", `{"type":"order"}`, js},
		{"append an event batch", "POST", base + "/v1/stream/orders/a", `[{"type":"order","idempotencyKey":"k1"}]`, js},
		{"append as a producer", "POST", base + "/v1/stream/orders/a", `{"type":"order"}`,
			append([]string{"Producer-Id", "p1", "Producer-Epoch", "0", "Producer-Seq", "0"}, js...)},
		{"append at an offset", "POST", base + "/v1/stream/orders/a", `{"type":"order"}`,
			append([]string{server.HeaderExpectedOffset, "-1"}, js...)},
		{"close", "POST", base + "/v1/stream/orders/a", "", []string{"Stream-Closed", "true"}},
		{"read", "GET", base + "/v1/stream/orders/a?offset=-1", "", nil},
		{"long-poll", "GET", base + "/v1/stream/orders/a?offset=-1&live=long-poll", "", nil},
		{"sse", "GET", base + "/v1/stream/orders/a?offset=-1&live=sse", "", nil},
		{"head", "HEAD", base + "/v1/stream/orders/a", "", nil},
		{"delete", "DELETE", base + "/v1/stream/orders/b", "", nil},
		{"read a missing stream", "GET", base + "/v1/stream/orders/none?offset=-1", "", nil},
		{"processor snapshot", "GET", base + "/v1/processor/totals/orders/a", "", nil},
		{"processor live view", "GET", base + "/v1/processor/totals/orders/a?view=live", "", nil},
		{"processor wait", "GET", base + "/v1/processor/totals/orders/a?waitUntilProcessed=99", "", nil},
		{"processor on a new stream", "GET", base + "/v1/processor/totals/orders/z", "", nil},
		{"stream list", "GET", base + server.ListPath, "", nil},
		{"stream info", "GET", base + server.InfoPath + "?path=/orders/a", "", nil},
		{"subscription create", "PUT", base + "/v1/stream/__ds/subscriptions/s1", `{"pattern":"/orders/*","type":"pull-wake","wake_stream":"/wakes"}`, js},
		{"subscription read", "GET", base + "/v1/stream/__ds/subscriptions/s0", "", nil},
		{"subscription delete", "DELETE", base + "/v1/stream/__ds/subscriptions/s0", "", nil},
		{"ready", "GET", base + server.ReadyPath, "", nil},
		{"health", "GET", base + server.HealthPath, "", nil},
	}
}

// While PostgreSQL is cut off, no answer of any route names the database: not its address or
// port, not its driver's words, not the Go packages behind the answer. Clients get a coded,
// generic message and an X-Request-Id; the server's log has the detail under that id.
func TestAnswersWhileTheDatabaseIsCutOffNeverNameIt(t *testing.T) {
	t.Parallel()
	direct := pgtest.URL(t)
	px, via := pgtest.NewProxy(t, direct)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), via, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	// The emit the cut refuses is not sent again (as after an outage longer than WriteRetry), so
	// the processor is failing with the driver's error as its cause while the cut lasts.
	h, err := host.New(st, host.Config{Logger: quiet, WriteRetry: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	c := foldstream.MustDefineContract(foldstream.ContractConfig[cutOffCount]{Slug: "totals", Version: "1", Consumes: []string{"order"}})
	if err := host.RegisterPattern(context.Background(), h, "/orders/*", cutOffCounter{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	// A processor whose emit fails while the database is cut off, so that it is failing with the
	// driver's error as its cause.
	em := &cutOffEmitter{entered: make(chan struct{}), release: make(chan struct{})}
	em.Base = foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[cutOffCount]{
		Slug: "emitter", Version: "1", Consumes: []string{"emit"}, Emits: []string{"emitted"}}))
	if err := host.RegisterPattern(context.Background(), h, "/emits/*", em); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Logger: logger, Processors: h, LongPollTimeout: 100 * time.Millisecond,
		ProcessorWaitTimeout: 500 * time.Millisecond, Metrics: server.NewMetrics()})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Shutdown(context.Background())

	for _, p := range []string{"/orders/a", "/orders/b"} {
		res, body := request(t, "PUT", ts.URL+"/v1/stream"+p, "", "Content-Type", "application/json")
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", p, res.StatusCode, body)
		}
	}
	if res, body := request(t, "GET", ts.URL+"/v1/processor/totals/orders/a", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("processor snapshot before the cut: %d %s", res.StatusCode, body)
	}

	words := append([]string{}, leakWords...)
	for _, raw := range []string{direct, via} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(u.Host)
		words = append(words, u.Host, ":"+port, u.Query().Get("search_path"))
	}

	if _, err := st.Events().Stream("/emits/e").Append(context.Background(), foldstream.EventInput{Type: "emit"}); err != nil {
		t.Fatal(err)
	}
	<-em.entered

	px.Cut()
	close(em.release)
	unavailable := 0
	failing := false
	check := func(rq cutOffRequest) {
		res, body := request(t, rq.method, rq.url, rq.body, rq.headers...)
		if res.Header.Get(server.HeaderErrorCode) == "PROCESSOR_FAILING" {
			failing = true
		}
		answer := strings.ToLower(body)
		for k, vs := range res.Header {
			answer += "\n" + strings.ToLower(k) + ": " + strings.ToLower(strings.Join(vs, ", "))
		}
		var named []string
		for _, w := range words {
			if w != "" && strings.Contains(answer, strings.ToLower(w)) {
				named = append(named, w)
			}
		}
		if named != nil {
			t.Errorf("%s: the answer (%d) names %q:\n%s", rq.name, res.StatusCode, named, answer)
		}
		id := res.Header.Get(server.HeaderRequestID)
		if id == "" {
			t.Errorf("%s: the answer (%d) has no %s", rq.name, res.StatusCode, server.HeaderRequestID)
		}
		if res.StatusCode >= 400 && res.Header.Get(server.HeaderErrorCode) == "" {
			t.Errorf("%s: the refusal (%d) has no %s", rq.name, res.StatusCode, server.HeaderErrorCode)
		}
		if res.Header.Get(server.HeaderErrorCode) == "UNAVAILABLE" {
			unavailable++
			// The detail is in the log, under the answer's request id.
			if line := logLineWith(logs.String(), id); !strings.Contains(line, "connect") && !strings.Contains(line, "unavailable") {
				t.Errorf("%s: the log has no detail under request id %q: %q", rq.name, id, line)
			}
		}
	}
	for _, rq := range cutOffRequests(ts.URL) {
		check(rq)
	}
	// The emitter's route answers PROCESSOR_FAILING once the host noted the failed emit: its
	// message says what fails where, not the driver's words.
	for deadline := time.Now().Add(30 * time.Second); !failing && !t.Failed(); {
		if time.Now().After(deadline) {
			t.Fatal("the emitter never answered PROCESSOR_FAILING while its emit failed")
		}
		check(cutOffRequest{name: "failing processor", method: "GET", url: ts.URL + "/v1/processor/emitter/emits/e"})
	}
	if unavailable < 10 {
		t.Errorf("only %d answers were UNAVAILABLE: the cut did not reach the routes", unavailable)
	}
}

// logLineWith returns the log lines naming id.
func logLineWith(logs, id string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if id != "" && strings.Contains(l, id) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

type cutOffCounter struct{ foldstream.Base[cutOffCount] }

// cutOffEmitter emits one event per "emit" it reduces, once released.
type cutOffEmitter struct {
	foldstream.Base[cutOffCount]
	entered, release chan struct{}
	once             sync.Once
}

func (p *cutOffEmitter) ProcessEvent(a *foldstream.ProcessEventArgs[cutOffCount]) error {
	if a.Event == nil {
		return nil
	}
	ev := a.Event
	a.BlockProcessorWhile(func(ctx context.Context) error {
		p.once.Do(func() { close(p.entered) })
		<-p.release
		_, err := a.Append(ctx, foldstream.EventInput{Type: "emitted", IdempotencyKey: p.IdempotencyKey("emitted", ev)})
		return err
	})
	return nil
}

func (cutOffCounter) Reduce(a foldstream.ReduceArgs[cutOffCount]) (cutOffCount, bool, error) {
	return cutOffCount{N: a.State.N + 1}, true, nil
}
