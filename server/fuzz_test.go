package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/storeopen"
)

// Fuzz targets for bad input. Seed corpora live in testdata/fuzz/<FuzzName>/. Run one with e.g.
//
//	go test ./server -run '^$' -fuzz '^FuzzHandler$' -fuzztime 60s

// FuzzParseOffset: the offset parser never panics, and every offset it accepts (other than the
// sentinels and beyond-tail offsets) formats back to itself.
func FuzzParseOffset(f *testing.F) {
	for _, s := range []string{"-1", "now", "0000000000000000_0000000000000000", "0000000000000000_0000000000000042",
		"9999999999999999_9999999999999999", "", "a,b", "../x", "0000000000000000_000000000000004\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pos, now, err := ParseOffset(s)
		if err != nil || now || s == "-1" || pos == beyondTail {
			return
		}
		if got := FormatOffset(pos); got != s {
			t.Fatalf("ParseOffset(%q) = %d, which formats as %q", s, pos, got)
		}
		if strings.ContainsAny(s, ",&=?/ \x00\n") {
			t.Fatalf("ParseOffset accepted %q", s)
		}
	})
}

// FuzzHeaderParsers: the header parsers never panic and accept only canonical forms.
func FuzzHeaderParsers(f *testing.F) {
	for _, s := range []string{"3600", "0", "00060", "+60", "60.5", "1e3", "-1", "abc", "2030-01-02T15:04:05.000Z",
		"2030-01-02T15:04:05+00:00", "99999999999999999999", "true", "TRUE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseTTL(s); err == nil {
			if itoa(v) != s {
				t.Fatalf("ParseTTL(%q) = %d, not canonical", s, v)
			}
		}
		if v, ok := parseDigits(s, maxSafeInteger); ok && (v < 0 || v > maxSafeInteger) {
			t.Fatalf("parseDigits(%q) = %d, out of range", s, v)
		}
		_, _ = ParseExpiresAt(s)
		_ = isTrue(s)
		_ = nextCursor(time.Now(), s)
		_, _ = parseReadQuery(s)
	})
}

var (
	fuzzOnce    sync.Once
	fuzzHandler http.Handler
)

// FuzzHandler drives the whole handler with random requests against one store: no request may
// panic the server or be answered with a 5xx.
func FuzzHandler(f *testing.F) {
	f.Add("PUT", "a", "", "text/plain", "", "", "", "", "", "", "hello")
	f.Add("POST", "a", "", "text/plain", "", "", "p", "0", "0", "", "x")
	f.Add("POST", "a", "", "", "true", "", "", "", "", "", "")
	f.Add("GET", "a", "offset=-1", "", "", "", "", "", "", "", "")
	f.Add("GET", "a", "offset=now&live=long-poll", "", "", "", "", "", "", "", "")
	f.Add("GET", "a", "offset=-1&live=sse", "", "", "", "", "", "", "", "")
	f.Add("PUT", "j", "", "application/json", "", "60", "", "", "", "", "[1,[2]]")
	f.Add("POST", "j", "", "application/json", "", "", "", "", "", "", "[]")
	f.Add("PUT", "f", "", "", "", "", "", "", "", "/v1/stream/j", "")
	f.Add("DELETE", "j", "", "", "", "", "", "", "", "", "")
	f.Add("HEAD", "__ds/x", "", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, method, name, query, ctype, closed, ttl, pid, pepoch, pseq, forkedFrom, body string) {
		fuzzOnce.Do(func() {
			st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{})
			if err != nil {
				panic(err)
			}
			if fuzzHandler, err = New(st, Config{LongPollTimeout: time.Millisecond, SSEMaxDuration: 5 * time.Millisecond}); err != nil {
				panic(err)
			}
		})
		switch method {
		case "GET", "PUT", "POST", "HEAD", "DELETE", "OPTIONS", "PATCH":
		default:
			method = "GET"
		}
		target := "/v1/stream/" + name
		if query != "" {
			target += "?" + query
		}
		req, err := http.NewRequest(method, "http://127.0.0.1"+sanitizeTarget(target), strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		set := func(k, v string) {
			if v != "" && validHeaderValue(v) {
				req.Header.Set(k, v)
			}
		}
		set("Content-Type", ctype)
		set("Stream-Closed", closed)
		set("Stream-TTL", ttl)
		set("Producer-Id", pid)
		set("Producer-Epoch", pepoch)
		set("Producer-Seq", pseq)
		set("Stream-Forked-From", forkedFrom)
		set("Stream-Fork-Offset", query)
		rec := httptest.NewRecorder()
		fuzzHandler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: status %d: %s", method, target, rec.Code, rec.Body.String())
		}
	})
}

func sanitizeTarget(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r == 0x7f || r == '#' {
			return -1
		}
		return r
	}, s)
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
