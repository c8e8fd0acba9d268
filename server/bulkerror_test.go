package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
)

// failingBulk is a Processors whose bulk verbs fail on one stream with err.
type failingBulk struct{ err error }

func (failingBulk) Snapshot(context.Context, string, string) (foldtype.Snapshot[json.RawMessage], error) {
	return foldtype.Snapshot[json.RawMessage]{}, nil
}

func (failingBulk) LiveSnapshot(context.Context, string, string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	return foldtype.LiveSnapshot[json.RawMessage]{}, nil
}

func (failingBulk) WaitUntilProcessed(context.Context, string, string, int64, time.Duration) error {
	return nil
}

func (f failingBulk) PauseMatching(context.Context, string, string, string, bool) (foldtype.BulkResult, error) {
	return foldtype.BulkResult{Matched: 2, Changed: 1, Failed: 1, FirstError: f.err.Error(), FirstErr: f.err}, nil
}

func (f failingBulk) ResumeMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error) {
	return f.PauseMatching(ctx, pattern, slug, "", dryRun)
}

func (f failingBulk) RetryMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error) {
	return f.PauseMatching(ctx, pattern, slug, "", dryRun)
}

func (f failingBulk) SkipMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (foldtype.BulkResult, error) {
	return f.PauseMatching(ctx, pattern, slug, reason, dryRun)
}

func (f failingBulk) RebuildMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error) {
	return f.PauseMatching(ctx, pattern, slug, "", dryRun)
}

// A bulk verb that failed on one stream tells the client that failure as every error answer does:
// a failure of the server's own condition (a database out of reach) by its code's generic message,
// never the driver's text with the database's address, and no Go package prefixes; the detail is
// in the server's log under the request id. A failure the client may read (a coded refusal) keeps
// its message, without the package prefix.
func TestABulkVerbTellsItsFirstFailureWithoutTheServersInternals(t *testing.T) {
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		err        error
		secret     string
	}{
		{"the database out of reach", "the store cannot be reached right now",
			fmt.Errorf("host: pause /carts/a: %w", foldtype.NewError(foldtype.CodeUnavailable, nil,
				"stream store: begin: failed to connect to `user=postgres database=prod`: 10.1.2.3:5432: connection refused")),
			"10.1.2.3"},
		{"no coded error", "internal error", fmt.Errorf("host: pause /carts/a: pgx: conn busy at 10.1.2.3"), "10.1.2.3"},
		{"a coded refusal", `processor "jobs" on "/carts/a" runs on node n2`,
			foldtype.NewError(foldtype.CodeConflict, nil, `host: processor "jobs" on "/carts/a" runs on node n2, which gives no address to ask`),
			"host:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "bulk.db"), storeopen.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(context.Background())
			srv := newServer(t, st, server.Config{Processors: failingBulk{c.err}, Authorize: bt.Authorize,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			ts := httptest.NewServer(srv)
			defer ts.Close()
			res, body := request(t, "POST", ts.URL+"/v1/processor/jobs/?op=pause&pattern=/carts/*", "", "Authorization", bearer(opsToken))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("bulk pause: %d %s", res.StatusCode, body)
			}
			var got foldtype.BulkResult
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if got.Failed != 1 || !strings.Contains(got.FirstError, c.want) || strings.Contains(body, c.secret) {
				t.Fatalf("the answer tells %q (want it to say %q and not %q): %s", got.FirstError, c.want, c.secret, body)
			}
			if c.secret == "10.1.2.3" && !strings.Contains(logs.String(), "10.1.2.3") {
				t.Fatalf("the withheld detail is not in the log:\n%s", logs.String())
			}
		})
	}
}
