package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// A stream created by an empty PUT under a pattern registration begins with what its writer
// appended: the platform's records (what `foldstream read --platform` shows) hold no birth
// record — the writer created the stream, not the platform — and one itx/woken when the processor
// starts work there (docs/store.md#records-nobody-appended), on both drivers.
func TestAStreamPutUnderAPatternGetsNoBirthRecord(t *testing.T) {
	for _, drv := range []string{"sqlite", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "birth.db")
			if drv == "postgres" {
				db = pgtest.URL(t)
			}
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			st, err := storeopen.Open(ctx, db, storeopen.Config{Store: stream.Config{Logger: quiet}})
			if err != nil {
				t.Fatal(err)
			}
			h, err := host.New(st, host.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(newServer(t, st, server.Config{Processors: h, Logger: quiet}))
			t.Cleanup(func() {
				ts.Close()
				_ = h.Shutdown(context.Background())
				st.Close(context.Background())
			})
			if err := host.RegisterPattern(ctx, h, "/carts/*", newTickStep(t, "ticks", nil)); err != nil {
				t.Fatal(err)
			}
			if res, body := request(t, http.MethodPut, ts.URL+"/v1/stream/carts/1", "", "Content-Type", "application/json"); res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, body)
			}
			// The stream is created empty: a wake of it (the host opening the processor for work
			// on a commit it hears of, as another node does of the creation) writes itx/woken alone.
			woken, err := st.Events().WakeExisting(ctx, "/carts/1", stream.WakeRequest)
			if err != nil || len(woken) != 1 || woken[0].Type != foldtype.WokenType {
				t.Fatalf("wake of the empty stream: %+v %v, want itx/woken alone", woken, err)
			}
			res, body := request(t, http.MethodPost, ts.URL+"/v1/stream/carts/1", `{"type":"tick","payload":{}}`, "Content-Type", "application/json")
			if res.StatusCode != http.StatusNoContent {
				t.Fatalf("append: %d %s", res.StatusCode, body)
			}
			tail, _, err := server.ParseOffset(res.Header.Get("Stream-Next-Offset"))
			if err != nil {
				t.Fatalf("next offset %q: %v", res.Header.Get("Stream-Next-Offset"), err)
			}
			if err := h.WaitUntilProcessed(ctx, "/carts/1", "ticks", tail, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			res, body = request(t, http.MethodGet, ts.URL+"/v1/stream/carts/1?offset=-1", "")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("read: %d %s", res.StatusCode, body)
			}
			var msgs []struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(body), &msgs); err != nil {
				t.Fatalf("read: %s: %v", body, err)
			}
			var types []string
			for _, m := range msgs {
				types = append(types, m.Type)
			}
			if len(types) != 2 || types[0] != foldtype.WokenType || types[1] != "tick" {
				t.Fatalf("the stream holds %v, want itx/woken (its one wake) and the writer's tick, no itx/created", types)
			}
		})
	}
}
