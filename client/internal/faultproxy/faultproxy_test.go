package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func counting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", string(b))
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		cfg         Config
		wantApplied int64 // requests the target saw
		wantErr     bool  // the client saw a broken connection
		wantStatus  int
	}{
		{"pass through", Config{}, 1, false, http.StatusOK},
		{"drop after apply", Config{DropResponse: 1}, 1, true, 0},
		{"duplicate", Config{Duplicate: 1}, 2, false, http.StatusOK},
		{"unavailable", Config{Unavailable: 1}, 0, false, http.StatusServiceUnavailable},
		{"other methods untouched", Config{DropResponse: 1, Methods: []string{http.MethodGet}}, 1, false, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			target, applied := counting(t)
			p, err := Start(target.URL, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			resp, err := http.Post(p.URL+"/s?x=1", "text/plain", strings.NewReader("body"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error: got %v, want error=%v", err, tc.wantErr)
			}
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Errorf("status: got %d, want %d", resp.StatusCode, tc.wantStatus)
				}
				if tc.wantStatus == http.StatusOK && resp.Header.Get("X-Echo") != "body" {
					t.Errorf("body forwarded: got %q, want %q", resp.Header.Get("X-Echo"), "body")
				}
			}
			if got := applied.Load(); got != tc.wantApplied {
				t.Errorf("requests reaching the target: got %d, want %d", got, tc.wantApplied)
			}
		})
	}
}
