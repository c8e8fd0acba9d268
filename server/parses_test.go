package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// A JSON POST is parsed once, by the scan that splits it, whether the writer is anonymous or
// authenticated (whose events get the principal's source), with a forged source, an escaped key
// and a keyed event in the batch; the stored messages carry the rules' outcome.
func TestJSONPostIsParsedOnce(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/parses.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	bt, err := server.ParseBearerTokens(testTokens)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`[{"type":"note.added","source":{"platform":true},"payload":{"source":1}},` +
		`{"type":"note.added","idempotencyKey":"k1"},{"sourc\u0065":2,"type":"note.added"},{"note":"plain"}]`)
	for _, bc := range []struct {
		name   string
		auth   bool
		stored string
	}{
		{"anonymous", false, `[{"type":"note.added","payload":{"source":1}},{"type":"note.added","idempotencyKey":"k1"},{"type":"note.added"},{"note":"plain"}]`},
		{"authenticated", true, `[{"type":"note.added","payload":{"source":1},"source":{"principal":{"actor":"alice"}}},` +
			`{"type":"note.added","idempotencyKey":"k1","source":{"principal":{"actor":"alice"}}},` +
			`{"type":"note.added","source":{"principal":{"actor":"alice"}}},{"note":"plain"}]`},
	} {
		cfg := server.Config{Logger: quiet}
		if bc.auth {
			cfg.Authorize = bt.Authorize
		}
		srv := newServer(t, st, cfg)
		do := func(method string, b []byte) *httptest.ResponseRecorder {
			req := httptest.NewRequest(method, "http://127.0.0.1/v1/stream/parses-"+bc.name, bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			if bc.auth {
				req.Header.Set("Authorization", bearer(writerToken))
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			return rec
		}
		if rec := do("PUT", nil); rec.Code != 201 {
			t.Fatalf("%s: PUT %d %s", bc.name, rec.Code, rec.Body)
		}
		before := rawjson.Splits()
		if rec := do("POST", body); rec.Code != 204 {
			t.Fatalf("%s: POST %d %s", bc.name, rec.Code, rec.Body)
		}
		if n := rawjson.Splits() - before; n != 1 {
			t.Errorf("%s: the POST was parsed %d times, want once", bc.name, n)
		}
		if rec := do("GET", nil); rec.Body.String() != bc.stored {
			t.Errorf("%s: stored %s\nwant %s", bc.name, rec.Body, bc.stored)
		}
		srv.Shutdown(context.Background())
	}
}
