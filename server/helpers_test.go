package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// Tokens of the secured test server (each at least server.MinTokenLength characters).
const (
	writerToken = "writer-token-0123456789abcdef"
	readerToken = "reader-token-0123456789abcdef"
	testTokens  = "alice read-write " + writerToken + "\nbob read " + readerToken + "\n"
)

type sourceLog struct {
	Sources []json.RawMessage `json:"sources"`
}

// sourceRecorder keeps the source of every event it reduces, as the processor saw it.
type sourceRecorder struct{ foldstream.Base[sourceLog] }

func (sourceRecorder) Reduce(a foldstream.ReduceArgs[sourceLog]) (sourceLog, bool, error) {
	next := sourceLog{Sources: append([]json.RawMessage(nil), a.State.Sources...)}
	b, err := json.Marshal(a.Event.Source)
	if err != nil {
		return a.State, false, err
	}
	next.Sources = append(next.Sources, b)
	return next, true, nil
}

// secured is a server over a real SQLite store in t.TempDir, with a host running the processor
// "sources" on /events, served on 127.0.0.1.
type secured struct {
	url string
	st  *stream.Store
	h   *host.Host
	srv *server.Server
}

// setupSecured starts a server with cfg (Processors, Logger and, when tokens is true, the
// built-in bearer tokens filled in).
func setupSecured(t *testing.T, cfg server.Config, tokens bool) *secured {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/secured.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[sourceLog]{
		Slug: "sources", Version: "1", Consumes: []string{"note.added"},
	})
	if _, err := host.Register(context.Background(), h, "/events", sourceRecorder{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	cfg.Processors = h
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.LongPollTimeout == 0 {
		cfg.LongPollTimeout = 100 * time.Millisecond
	}
	if tokens {
		bt, err := server.ParseBearerTokens(testTokens)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Authorize = bt.Authorize
	}
	srv, ts := serveHosted(t, st, h, cfg)
	return &secured{url: ts.URL, st: st, h: h, srv: srv}
}

// serveHosted serves st and its host h on 127.0.0.1 with cfg; at the test's end it shuts the
// server down, then the host, then closes the store.
func serveHosted(t testing.TB, st *stream.Store, h *host.Host, cfg server.Config) (*server.Server, *httptest.Server) {
	t.Helper()
	srv := newServer(t, st, cfg)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	return srv, ts
}

// request sends one request; headers are name, value pairs. The body is read in full.
func request(t testing.TB, method, url, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// wantCoded checks a refusal's status and Foldstream-Error-Code, and its problem body
// (wantProblem).
func wantCoded(t *testing.T, what string, res *http.Response, body string, status int, code foldtype.Code) {
	t.Helper()
	if res.StatusCode != status || res.Header.Get(server.HeaderErrorCode) != string(code) {
		t.Fatalf("%s: got %d %q (%s), want %d %s", what, res.StatusCode, res.Header.Get(server.HeaderErrorCode), strings.TrimSpace(body), status, code)
	}
	wantProblem(t, what, res, body)
}

func bearer(tok string) string { return "Bearer " + tok }

// newServer is server.New for a test: a configuration New refuses fails the test.
func newServer(t testing.TB, st *stream.Store, cfg server.Config) *server.Server {
	t.Helper()
	srv, err := server.New(st, cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	return srv
}

// opsServer starts what the processor verbs' HTTP tests drive: a store in a file of the test's own
// (clk its clock; nil: the real one), a host with hcfg (its Logger quiet), and an HTTP server of
// the store with the host's processor routes, the test tokens and operator's ops token (opsToken).
// scfg's Processors and Authorize are set here; its Logger defaults to a quiet one. Everything
// closes when the test ends: the server, then the host, then the store.
func opsServer(t *testing.T, clk foldtype.Clock, hcfg host.Config, operator string, scfg server.Config) (*stream.Store, *host.Host, *httptest.Server) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "ops.db"), storeopen.Config{Store: stream.Config{Logger: quiet, Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Logger = quiet
	h, err := host.New(st, hcfg)
	if err != nil {
		st.Close(context.Background())
		t.Fatal(err)
	}
	bt, err := server.ParseBearerTokens(testTokens + operator + " ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	scfg.Processors, scfg.Authorize = h, bt.Authorize
	if scfg.Logger == nil {
		scfg.Logger = quiet
	}
	_, ts := serveHosted(t, st, h, scfg)
	return st, h, ts
}

// testClient is the tests' HTTP client, with a transport of its own: closing an
// httptest.Server closes the idle connections of http.DefaultTransport, which fails a request
// another parallel test is just sending on one of them ("CloseIdleConnections called").
var testClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
