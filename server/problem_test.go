package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// problemBody is an error answer's RFC 9457 body as a client reads it.
type problemBody struct {
	Type                string               `json:"type"`
	Title               string               `json:"title"`
	Status              int                  `json:"status"`
	Detail              string               `json:"detail"`
	Code                string               `json:"code"`
	RequestID           string               `json:"requestId"`
	RetryAfter          *int                 `json:"retryAfter"`
	Limit               *int64               `json:"limit"`
	LimitUnit           string               `json:"limitUnit"`
	Violations          []foldtype.Violation `json:"violations"`
	ViolationsTotal     int                  `json:"violationsTotal"`
	ViolationsTruncated bool                 `json:"violationsTruncated"`
	Failure             map[string]any       `json:"failure"`
}

// goPackageWords are what a message must never show a client: Go package names and the decoder's
// own prefixes (docs/server.md#errors).
var goPackageWords = []string{"host:", "append:", "stream:", "stream store:", "server:", "engine:",
	"contract:", "foldstream:", "foldtype:", "jsonschema:", "json:", "sqlitedriver", "pgdriver", "pgx", "sqlite3",
	"mem://", "runtime.", "goroutine"}

// wantProblem checks that res (with its body) is an error answer in the problem shape: the
// content type, every standard member, the code the header names, the request id the header
// names, retryAfter as Retry-After says, and no Go package name in the detail. It returns the
// decoded body. A HEAD answer has no body and is checked by its headers only.
func wantProblem(t *testing.T, what string, res *http.Response, body string) problemBody {
	t.Helper()
	var p problemBody
	if res.StatusCode < 400 {
		t.Errorf("%s: status %d, want an error answer", what, res.StatusCode)
		return p
	}
	code := res.Header.Get(server.HeaderErrorCode)
	if code == "" {
		t.Errorf("%s: no %s", what, server.HeaderErrorCode)
	}
	if res.Header.Get(server.HeaderRequestID) == "" {
		t.Errorf("%s: no %s", what, server.HeaderRequestID)
	}
	if res.Request != nil && res.Request.Method == http.MethodHead {
		return p
	}
	if ct := res.Header.Get("Content-Type"); ct != server.ProblemContentType {
		t.Errorf("%s: Content-Type %q, want %s (body %q)", what, ct, server.ProblemContentType, body)
	}
	var members map[string]any
	if err := json.Unmarshal([]byte(body), &members); err != nil {
		t.Errorf("%s: body is not a JSON object: %v (%q)", what, err, body)
		return p
	}
	for _, m := range []string{"type", "title", "status", "detail", "code", "requestId"} {
		if _, ok := members[m]; !ok {
			t.Errorf("%s: no %q member in %s", what, m, body)
		}
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Errorf("%s: a member has the wrong type: %v (%s)", what, err, body)
	}
	if p.Type != server.ProblemTypePrefix+code || p.Code != code || p.Status != res.StatusCode || p.Title == "" || p.Detail == "" {
		t.Errorf("%s: problem %+v does not match the answer %d %s", what, p, res.StatusCode, code)
	}
	if p.RequestID != res.Header.Get(server.HeaderRequestID) {
		t.Errorf("%s: requestId %q, header %q", what, p.RequestID, res.Header.Get(server.HeaderRequestID))
	}
	if ra := res.Header.Get("Retry-After"); ra != "" {
		if n, _ := strconv.Atoi(ra); p.RetryAfter == nil || *p.RetryAfter != n {
			t.Errorf("%s: retryAfter %v, Retry-After %q", what, p.RetryAfter, ra)
		}
	} else if p.RetryAfter != nil {
		t.Errorf("%s: retryAfter %d without Retry-After", what, *p.RetryAfter)
	}
	for _, w := range goPackageWords {
		if strings.Contains(p.Detail, w) {
			t.Errorf("%s: detail %q names %q", what, p.Detail, w)
		}
	}
	return p
}

// codedProcessors answers every processor read of /codes/<CODE> with a coded error of that code,
// worded the way the host's errors are (a Go package first, wrappers around it) and holding a
// database's words: what a client is told of each.
type codedProcessors struct{}

const secretWords = "dial tcp 10.9.8.7:5432: pgx: password authentication failed for user \"ops\""

func (codedProcessors) err(path string) error {
	code := foldtype.Code(strings.TrimPrefix(path, "/codes/"))
	data := map[string]any{"slug": "carts", "path": path, "lease": "p\x00/secret-lease", "node": "node-7"}
	msg := fmt.Sprintf("host: processor %q on %q: %s", "carts", path, strings.ToLower(string(code)))
	switch code {
	case foldtype.CodeProcessorFailing:
		data = map[string]any{"slug": "carts", "path": path, "code": "UNAVAILABLE", "message": secretWords,
			"offset": int64(4), "attempts": 3, "nextRetry": time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)}
		msg = "host: processor \"carts\" is failing at offset 4 (UNAVAILABLE: " + secretWords + ")"
	case foldtype.CodeUnavailable, foldtype.CodeInsufficientStorage, foldtype.CodeInternal, foldtype.CodeClosed,
		foldtype.CodeCommitOutcomeUnknown:
		msg = "stream store: begin: " + secretWords
	case foldtype.CodeTooLarge:
		data[foldtype.DataLimit] = int64(1234)
	}
	return fmt.Errorf("host: snapshot: %w", &foldtype.Error{Code: code, Message: msg, Data: data})
}

func (c codedProcessors) Snapshot(_ context.Context, path, _ string) (foldtype.Snapshot[json.RawMessage], error) {
	return foldtype.Snapshot[json.RawMessage]{}, c.err(path)
}

func (c codedProcessors) LiveSnapshot(_ context.Context, path, _ string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	return foldtype.LiveSnapshot[json.RawMessage]{}, c.err(path)
}

func (c codedProcessors) WaitUntilProcessed(_ context.Context, path, _ string, _ int64, _ time.Duration) error {
	return c.err(path)
}

// Every code the server answers with (every code of the catalogue that has an HTTP status) comes
// over HTTP as an RFC 9457 problem: application/problem+json with type, title, status, detail,
// code and requestId matching the answer's headers, retryAfter as Retry-After says; its detail
// names no Go package and, for the codes of the server's own condition, none of the database's
// words; a failing processor's failure and a 413's limit are members.
func TestEveryCodeTheServerAnswersComesAsAProblem(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/codes.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Processors: codedProcessors{}, Logger: quiet})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		st.Close(context.Background())
	})
	codes := server.AnsweredCodes()
	if len(codes) < 35 {
		t.Fatalf("%d codes answered, want every one", len(codes))
	}
	for _, code := range slices.Sorted(func(yield func(string) bool) {
		for c := range codes {
			if !yield(c) {
				return
			}
		}
	}) {
		res, body := request(t, "GET", ts.URL+"/v1/processor/carts/codes/"+code, "")
		what := "GET of a processor answering " + code
		if res.StatusCode != codes[code] || res.Header.Get(server.HeaderErrorCode) != code {
			t.Errorf("%s: %d %s, want %d %s", what, res.StatusCode, res.Header.Get(server.HeaderErrorCode), codes[code], code)
			continue
		}
		p := wantProblem(t, what, res, body)
		for _, w := range []string{"10.9.8.7", "5432", "password", "secret-lease", "node-7"} {
			if strings.Contains(body, w) {
				t.Errorf("%s: the body names %q: %s", what, w, body)
			}
		}
		switch foldtype.Code(code) {
		case foldtype.CodeProcessorFailing:
			if p.Failure["code"] != "UNAVAILABLE" || p.Failure["offset"] != float64(4) || p.Failure["attempts"] != float64(3) || p.RetryAfter == nil {
				t.Errorf("%s: failure %v, retryAfter %v", what, p.Failure, p.RetryAfter)
			}
		case foldtype.CodeTooLarge:
			if p.Limit == nil || *p.Limit != 1234 {
				t.Errorf("%s: limit %v, want 1234", what, p.Limit)
			}
		}
	}
}

// lineAdded is the payload the "lines" processor's schema checks: a positive quantity and a SKU.
type lineAdded struct {
	SKU string `json:"sku" jsonschema:"required,minLength=1"`
	Qty int    `json:"qty" jsonschema:"minimum=1"`
}

type lineCount struct {
	N int `json:"n"`
}

type lineCounter struct{ foldstream.Base[lineCount] }

func (lineCounter) Reduce(a foldstream.ReduceArgs[lineCount]) (lineCount, bool, error) {
	return lineCount{N: a.State.N + 1}, true, nil
}

// setupRefusing serves a real SQLite store with the processor "lines" on /orders/*, registered
// with RefuseInvalidEvents, and MaxBodyBytes maxBody.
func setupRefusing(t *testing.T, maxBody int64) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/refusing.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := foldstream.MustDefineContract(foldstream.ContractConfig[lineCount]{
		Slug: "lines", Version: "1", Consumes: []string{"line.added"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[lineAdded]("line.added", "a line was added to the order")},
	})
	if err := host.RegisterPattern(context.Background(), h, "/orders/*", lineCounter{foldstream.NewBase(c)}, host.RefuseInvalidEvents()); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Processors: h, Logger: quiet, MaxBodyBytes: maxBody})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		_ = h.Shutdown(context.Background())
		st.Close(context.Background())
	})
	if res, body := request(t, "PUT", ts.URL+"/v1/stream/orders/o1", "", "Content-Type", "application/json"); res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	return ts.URL
}

// A batch with three bad messages among good ones is refused as a whole, and the refusal lists
// every violation: each with the message's index in the batch and the JSON pointer of the value
// that breaks the schema, in the problem body's violations; nothing is written.
func TestARefusedBatchListsEveryViolationWithItsIndexAndPointer(t *testing.T) {
	t.Parallel()
	base := setupRefusing(t, 0)
	u := base + "/v1/stream/orders/o1"
	batch := `[` +
		`{"type":"line.added","payload":{"sku":"a","qty":1}},` +
		`{"type":"line.added","payload":{"sku":"b","qty":0}},` +
		`{"type":"line.added","payload":{"sku":"c","qty":2}},` +
		`{"type":"line.added","payload":{"qty":3}},` +
		`{"type":"line.added","payload":{"sku":"e","qty":"four"}}]`
	res, body := request(t, "POST", u, batch, "Content-Type", "application/json")
	wantCoded(t, "a batch with three bad messages", res, body, 400, foldtype.CodeInvalidEvent)
	p := wantProblem(t, "a batch with three bad messages", res, body)
	want := []struct {
		index   int
		pointer string
	}{{1, "/payload/qty"}, {3, "/payload"}, {4, "/payload/qty"}}
	if len(p.Violations) != len(want) || p.ViolationsTruncated {
		t.Fatalf("violations %+v (truncated %v), want %v", p.Violations, p.ViolationsTruncated, want)
	}
	for i, w := range want {
		v := p.Violations[i]
		if v.Index != w.index || v.Pointer != w.pointer || v.Message == "" {
			t.Errorf("violation %d: %+v, want index %d pointer %q and a message", i, v, w.index, w.pointer)
		}
		for _, word := range goPackageWords {
			if strings.Contains(v.Message, word) {
				t.Errorf("violation %d: message %q names %q", i, v.Message, word)
			}
		}
	}
	if !strings.Contains(p.Detail, "3 schema violation") {
		t.Errorf("detail %q does not count the violations", p.Detail)
	}
	res, body = request(t, "GET", u+"?offset=-1", "")
	if res.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("read after the refusal: %d %s, want nothing written", res.StatusCode, body)
	}
}

// A batch with more violations than a refusal lists names the first MaxViolations, says how many
// there were, and that the list is cut.
func TestARefusalWithManyViolationsCutsTheListAndSaysSo(t *testing.T) {
	t.Parallel()
	base := setupRefusing(t, 0)
	const bad = server.MaxViolations + 50
	msgs := make([]string, bad)
	for i := range msgs {
		msgs[i] = `{"type":"line.added","payload":{"sku":"x","qty":0}}`
	}
	res, body := request(t, "POST", base+"/v1/stream/orders/o1", "["+strings.Join(msgs, ",")+"]", "Content-Type", "application/json")
	wantCoded(t, "a batch of bad messages", res, body, 400, foldtype.CodeInvalidEvent)
	p := wantProblem(t, "a batch of bad messages", res, body)
	if len(p.Violations) != server.MaxViolations || p.ViolationsTotal != bad || !p.ViolationsTruncated {
		t.Fatalf("%d violations, total %d, truncated %v; want %d of %d, truncated", len(p.Violations), p.ViolationsTotal,
			p.ViolationsTruncated, server.MaxViolations, bad)
	}
	if last := p.Violations[len(p.Violations)-1]; last.Index != server.MaxViolations-1 {
		t.Errorf("the last listed violation is of message %d, want %d", last.Index, server.MaxViolations-1)
	}
	if !strings.Contains(p.Detail, strconv.Itoa(bad)) || !strings.Contains(p.Detail, "first "+strconv.Itoa(server.MaxViolations)) {
		t.Errorf("detail %q does not say the list is cut", p.Detail)
	}
}

// A body over MaxBodyBytes is refused 413 TOO_LARGE, and the refusal states the limit: in bytes in
// its detail and in its limit member.
func TestA413StatesTheLimit(t *testing.T) {
	t.Parallel()
	const limit = 1000
	base := setupRefusing(t, limit)
	big := `[{"type":"line.added","payload":{"sku":"` + strings.Repeat("x", 2*limit) + `","qty":1}}]`
	for _, chunked := range []bool{false, true} {
		what := fmt.Sprintf("a body over the limit (chunked %v)", chunked)
		req, err := http.NewRequest("POST", base+"/v1/stream/orders/o1", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if chunked {
			req.ContentLength = -1 // no length: the server finds out while it reads
		}
		res, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantCoded(t, what, res, string(b), 413, foldtype.CodeTooLarge)
		p := wantProblem(t, what, res, string(b))
		if p.Limit == nil || *p.Limit != limit || p.LimitUnit != "bytes" || !strings.Contains(p.Detail, strconv.Itoa(limit)+" bytes") {
			t.Errorf("%s: limit %v %q, detail %q; want %d bytes in both", what, p.Limit, p.LimitUnit, p.Detail, limit)
		}
	}
}
