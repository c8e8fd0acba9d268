package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// BenchmarkJSONAppend serves JSON POSTs in process (no network) to a store on an in-memory
// SQLite database: a batch of 10 event-shaped messages (about 150 bytes each, one with a forged
// source), anonymous and with a bearer token (so every event gets the principal's source).
func BenchmarkJSONAppend(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	var batch bytes.Buffer
	batch.WriteByte('[')
	for i := range 10 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`{"type":"note.added","payload":{"id":"note-` + strconv.Itoa(i) + `","text":"a note of some ordinary length, written by a client","tags":["a","b"]}`)
		if i == 3 {
			batch.WriteString(`,"source":{"platform":true}`)
		}
		batch.WriteByte('}')
	}
	batch.WriteByte(']')
	body := batch.Bytes()
	bt, err := server.ParseBearerTokens(testTokens)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		auth bool
	}{{"anonymous", false}, {"authenticated", true}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := server.Config{Logger: quiet}
			if bc.auth {
				cfg.Authorize = bt.Authorize
			}
			srv := newServer(b, st, cfg)
			defer srv.Shutdown(context.Background())
			path := "http://127.0.0.1/v1/stream/bench-" + bc.name
			put := httptest.NewRequest("PUT", path, nil)
			put.Header.Set("Content-Type", "application/json")
			if bc.auth {
				put.Header.Set("Authorization", bearer(writerToken))
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, put)
			if rec.Code != 201 && rec.Code != 200 {
				b.Fatalf("PUT: %d %s", rec.Code, rec.Body)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if bc.auth {
					req.Header.Set("Authorization", bearer(writerToken))
				}
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				if rec.Code != 204 {
					b.Fatalf("POST: %d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
