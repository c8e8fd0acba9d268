package stream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
)

var badStreamNames = []string{
	"", "/", "//a", "/a//b", "/a/", "a/", "/./a", "/a/.", "/a/../b", "..", ".", "/a\x00b", "/a\nb", "/a\x7fb",
	"/a\u0085b", "/\xff", "/a\xc3", "/" + strings.Repeat("x", MaxStreamNameBytes),
}

var goodStreamNames = []string{
	"/orders/42", "orders", "/a", "/a.b/..c/.d", "/carts/ü/🛒", "/with space/and-dash_underscore", "/a\\b",
	"/" + strings.Repeat("x", MaxStreamNameBytes-1),
}

// TestStreamNamesAreValidatedByBothViews: a stream cannot be created under a bad name by the
// event view's first append nor by a protocol create; both refuse with INVALID_STREAM_NAME and
// leave nothing behind, and good names work in both.
func TestStreamNamesAreValidatedByBothViews(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	for _, name := range badStreamNames {
		if _, err := s.Events().Stream(name).Append(ctx, ev("x")); !errors.Is(err, foldtype.ErrInvalidStreamName) {
			t.Errorf("Append(%q): got %v, want INVALID_STREAM_NAME", name, err)
		}
		if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: name, ContentType: "text/plain"}); !errors.Is(err, foldtype.ErrInvalidStreamName) {
			t.Errorf("CreateStream(%q): got %v, want INVALID_STREAM_NAME", name, err)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams`); n != 0 {
		t.Fatalf("streams after refused names: got %d, want 0", n)
	}
	for i, name := range goodStreamNames {
		if i%2 == 0 {
			mustAppend(t, s, name, ev("x"))
		} else {
			mustCreate(t, s, CreateRequest{Path: name, ContentType: "application/json"})
		}
	}
}

// TestCreateRefusesExpiredOrNonPositiveTTL: a stream cannot be created already expired, nor with
// a TTL under one second.
func TestCreateRefusesExpiredOrNonPositiveTTL(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	for _, req := range []CreateRequest{
		{Path: "/past", ExpiresAt: clk.Now().Add(-time.Second)},
		{Path: "/now", ExpiresAt: clk.Now()},
		{Path: "/zero", HasTTL: true, TTLSeconds: 0},
		{Path: "/negative", HasTTL: true, TTLSeconds: -5},
	} {
		if _, err := s.Protocol().CreateStream(ctx, req); !errors.Is(err, foldtype.ErrBadRequest) {
			t.Errorf("create %s: got %v, want BAD_REQUEST", req.Path, err)
		}
	}
	mustCreate(t, s, CreateRequest{Path: "/future", ExpiresAt: clk.Now().Add(time.Second)})
	mustCreate(t, s, CreateRequest{Path: "/ttl", HasTTL: true, TTLSeconds: 1})
}

// TestProducerIDLimits: producer ids that are too long, not UTF-8 or hold control characters are
// refused with BAD_REQUEST before anything is written.
func TestProducerIDLimits(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "/p", ContentType: "text/plain"})
	for _, id := range []string{"", strings.Repeat("p", MaxProducerIDBytes+1), "\xff", "a\x00b", "a\tb"} {
		_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "text/plain", Body: []byte("x"), Producer: &ProducerHeaders{ID: id}})
		if !errors.Is(err, foldtype.ErrBadRequest) {
			t.Errorf("producer id %q: got %v, want BAD_REQUEST", id, err)
		}
	}
	mustAppendRecord(t, s, AppendRequest{Path: "/p", ContentType: "text/plain", Body: []byte("x"),
		Producer: &ProducerHeaders{ID: strings.Repeat("p", MaxProducerIDBytes)}})
	if got := readAll(t, s, "/p"); got != "x" {
		t.Fatalf("data: got %q, want \"x\"", got)
	}
}

// FuzzValidateStreamName: ValidateStreamName accepts exactly the names the rules describe, checked
// against a plain restatement of them, and its refusals are coded.
func FuzzValidateStreamName(f *testing.F) {
	for _, n := range append(append([]string{}, badStreamNames...), goodStreamNames...) {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateStreamName(name)
		want := len(name) > 0 && len(name) <= MaxStreamNameBytes && utf8.ValidString(name) &&
			strings.IndexFunc(name, unicode.IsControl) < 0
		if want {
			for _, seg := range strings.Split(strings.TrimPrefix(name, "/"), "/") {
				if seg == "" || seg == "." || seg == ".." {
					want = false
				}
			}
		}
		if got := err == nil; got != want {
			t.Fatalf("ValidateStreamName(%q) = %v; the rules say valid=%v", name, err, want)
		}
		if err != nil && !errors.Is(err, foldtype.ErrInvalidStreamName) {
			t.Fatalf("ValidateStreamName(%q) = %v, want INVALID_STREAM_NAME", name, err)
		}
	})
}
