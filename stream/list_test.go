package stream

import (
	"context"
	"slices"
	"testing"
	"time"
)

func listPaths(t *testing.T, s *Store, opts ListOptions) []string {
	t.Helper()
	infos, err := s.Protocol().ListStreams(context.Background(), opts)
	if err != nil {
		t.Fatalf("list %+v: %v", opts, err)
	}
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Path
	}
	return out
}

// TestListStreamsPagesByPath: streams of both views are listed in path order with their metadata,
// a prefix narrows the list, After and Limit page through it, and deleted or expired streams are
// left out.
func TestListStreamsPagesByPath(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := context.Background()
	mustAppend(t, s, "/carts/2", ev("a"), ev("b"))
	mustCreate(t, s, CreateRequest{Path: "/carts/1", ContentType: "text/plain", Body: []byte("abc"), Closed: true})
	mustCreate(t, s, CreateRequest{Path: "/carts", ContentType: "text/plain"})
	mustCreate(t, s, CreateRequest{Path: "/cartsx", ContentType: "text/plain"})
	mustCreate(t, s, CreateRequest{Path: "/orders/1", ContentType: "application/json"})
	mustCreate(t, s, CreateRequest{Path: "/carts/ttl", ContentType: "text/plain", HasTTL: true, TTLSeconds: 5})
	mustCreate(t, s, CreateRequest{Path: "/carts/gone", ContentType: "text/plain"})
	if err := s.Protocol().DeleteStream(ctx, "/carts/gone"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/carts/soft", ContentType: "text/plain"})
	mustCreate(t, s, CreateRequest{Path: "/forks/soft", ForkedFrom: "/carts/soft"})
	if err := s.Protocol().DeleteStream(ctx, "/carts/soft"); err != nil {
		t.Fatal(err)
	}

	all := []string{"/carts", "/carts/1", "/carts/2", "/carts/ttl", "/cartsx", "/forks/soft", "/orders/1"}
	if got := listPaths(t, s, ListOptions{}); !slices.Equal(got, all) {
		t.Fatalf("all: got %q, want %q", got, all)
	}
	if got, want := listPaths(t, s, ListOptions{Prefix: "/carts/"}), []string{"/carts/1", "/carts/2", "/carts/ttl"}; !slices.Equal(got, want) {
		t.Fatalf("prefix /carts/: got %q, want %q", got, want)
	}
	// Paging: two at a time, each page after the last path of the one before.
	var paged []string
	after := ""
	for range 10 {
		page := listPaths(t, s, ListOptions{After: after, Limit: 2})
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if !slices.Equal(paged, all) {
		t.Fatalf("paged: got %q, want %q", paged, all)
	}
	if got, want := listPaths(t, s, ListOptions{Prefix: "/carts/", After: "/carts/1"}), []string{"/carts/2", "/carts/ttl"}; !slices.Equal(got, want) {
		t.Fatalf("prefix and after: got %q, want %q", got, want)
	}

	infos, err := s.Protocol().ListStreams(ctx, ListOptions{Prefix: "/carts/", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if in := infos[0]; in.Path != "/carts/1" || in.ContentType != "text/plain" || in.Tail != 3 || !in.Closed || in.CreatedMs != clk.Now().UnixMilli() {
		t.Fatalf("/carts/1: got %+v", in)
	}
	if in := infos[1]; in.Path != "/carts/2" || !in.JSON || in.Tail != 2 || in.Closed {
		t.Fatalf("/carts/2: got %+v", in)
	}

	clk.Advance(6 * time.Second) // the TTL stream expires; expired ones in the middle of a page are skipped
	want := []string{"/carts", "/carts/1", "/carts/2", "/cartsx"}
	if got := listPaths(t, s, ListOptions{Limit: 4}); !slices.Equal(got, want) {
		t.Fatalf("after expiry: got %q, want %q", got, want)
	}
}

// TestOnStreamCreatedReportsBothViews: a listener hears of every stream created by the event view
// or the protocol view (forks and re-created paths included), after the commit and in commit
// order; appends to existing streams and refused creates say nothing, and a panicking listener
// keeps receiving.
func TestOnStreamCreatedReportsBothViews(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mustAppend(t, s, "/before", ev("a"))
	got := make(chan string, 100)
	stop := s.Events().OnStreamCreated(func(path string) {
		got <- path
		if path == "/panics" {
			panic("listener fault")
		}
	})
	defer stop()

	mustAppend(t, s, "/ev", ev("a"))
	mustAppend(t, s, "/ev", ev("b"))
	if _, err := s.Events().Stream("/refused").Append(ctx, ev("")); err == nil {
		t.Fatal("append with an empty type: got nil error")
	}
	mustCreate(t, s, CreateRequest{Path: "/panics", ContentType: "text/plain"})
	mustCreate(t, s, CreateRequest{Path: "/proto", ContentType: "text/plain"})
	mustCreate(t, s, CreateRequest{Path: "/proto", ContentType: "text/plain"}) // idempotent: exists
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/proto", ContentType: "application/json"}); err == nil {
		t.Fatal("conflicting create: got nil error")
	}
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/proto"})
	if err := s.Protocol().DeleteStream(ctx, "/ev"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/ev", ev("again"))

	want := []string{"/ev", "/panics", "/proto", "/fork", "/ev"}
	for i, w := range want {
		select {
		case p := <-got:
			if p != w {
				t.Fatalf("notice %d: got %q, want %q", i, p, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("notice %d (%q) never came", i, w)
		}
	}
	stop()
	mustAppend(t, s, "/after-stop", ev("a"))
	// Notices are queued before the creating call returns: had the stopped listener still been
	// registered, the notice would be in the queue by now, and a stopped listener runs none.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		t.Fatalf("unexpected notice %q", p)
	default:
	}
}
