package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// opsNode is one node of a cluster on PostgreSQL: a store, a host whose leases name the node's
// address, and its server, with the node's log.
type opsNode struct {
	url  string
	st   *stream.Store
	h    *host.Host
	logs *syncBuffer
}

func startOpsNode(t *testing.T, db, name string, bt *server.BearerTokens) *opsNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), db, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	n := &opsNode{url: "http://" + ts.Listener.Addr().String(), st: st, logs: &syncBuffer{}}
	if n.h, err = host.New(st, host.Config{Logger: quiet, NodeID: name, Addr: n.url}); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Processors: n.h, Authorize: bt.Authorize, Logger: slog.New(slog.NewTextHandler(n.logs, nil))})
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = n.h.Shutdown(context.Background())
		_ = st.Close(context.Background())
	})
	return n
}

// On PostgreSQL, an operator's retry sent to a node that does not run the processor is asked of the
// node that does, with the operator's token: both nodes' logs hold the audit line of the same
// actor and reason, done; fixed and retried, the processor processes what waited behind its
// failing event.
func TestRetrySentToAnotherNodeRunsOnTheOwner(t *testing.T) {
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	owner := startOpsNode(t, db, "owner", bt)
	other := startOpsNode(t, db, "other", bt) // runs no processor: it can only ask the owner
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"},
	}))}
	p.broken.Store(true)
	if _, err := host.Register(ctx, owner.h, "/work", p); err != nil {
		t.Fatal(err)
	}
	got, err := owner.st.Events().Stream("/work").Append(ctx, foldtype.EventInput{Type: "job"},
		foldtype.EventInput{Type: "poison"}, foldtype.EventInput{Type: "job"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if sts := owner.h.ProcessorsOn(ctx, "/work"); len(sts) == 1 && sts[0].Failing != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the processor never failed")
		}
		runtime.Gosched() // the failure is the owner's state, moved by its engine
	}
	// Still broken: the forwarded attempt runs on the owner (and fails again), so what the owner
	// logs is this retry's, not one its own backoff made succeed.
	retry := other.url + "/v1/processor/jobs/work?op=retry&reason=fixed+downstream"
	for {
		// The other node learns of the owner's lease on its next scan: until then the processor is
		// unknown there (404 NOT_REGISTERED).
		res, body := request(t, "POST", retry, "", "Authorization", bearer(opsToken))
		if res.StatusCode == http.StatusOK {
			break
		}
		if res.StatusCode != http.StatusNotFound || ctx.Err() != nil {
			t.Fatalf("retry through the other node: %d %s", res.StatusCode, body)
		}
		runtime.Gosched()
	}
	for _, n := range []*opsNode{owner, other} {
		if a := n.logs.String(); !strings.Contains(a, "audit: processor retry") || !strings.Contains(a, "actor=carol") ||
			!strings.Contains(a, "outcome=done") || !strings.Contains(a, `reason="fixed downstream"`) {
			t.Fatalf("the audit lines of a node:\n%s", a)
		}
	}
	// The audit in the database holds the verb once: the owner that took it stored it, and the
	// other node, told so by the owner's answer, did not store it again.
	recs, err := owner.h.Audit(ctx, "/work", "jobs", 0)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, a := range recs {
		if a.Op == "retry" && a.Outcome == "done" {
			done++
			if a.Actor != "carol" || a.Reason != "fixed downstream" || a.Node != "owner" {
				t.Fatalf("the retry's audit record: %+v", a)
			}
		}
	}
	if done != 1 {
		t.Fatalf("%d audit records of the retry done, want 1: %+v", done, recs)
	}
	// Fixed: retried on the owner until an attempt that started after the fix has run.
	p.broken.Store(false)
	for {
		sts := owner.h.ProcessorsOn(ctx, "/work")
		if len(sts) == 1 && sts[0].Failing == nil && sts[0].Offset >= got[2].Offset {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the processor did not recover: %+v", sts)
		}
		_ = owner.h.RetryNow(ctx, "/work", "jobs")
		runtime.Gosched()
	}
}

// A verb one node forwarded reaches a node that does not run the processor either (their views of
// the lease disagree, one behind a move): that node answers 503 UNAVAILABLE, to be tried again,
// rather than pass it on — two nodes each naming the other would send it round between them. The
// owner is not asked and nothing is paused.
func TestAForwardedVerbIsNotPassedOnAgain(t *testing.T) {
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	owner := startOpsNode(t, db, "owner", bt)
	other := startOpsNode(t, db, "other", bt)
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"},
	}))}
	if _, err := host.Register(ctx, owner.h, "/work", p); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.st.Events().Stream("/work").Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.h.Snapshot(ctx, "/work", "jobs"); err != nil { // opened: the owner holds the lease
		t.Fatal(err)
	}
	pause := other.url + "/v1/processor/jobs/work?op=pause&reason=loop"
	for {
		// As if the owner had forwarded it, believing the other node runs the processor.
		res, body := request(t, "POST", pause, "", "Authorization", bearer(opsToken), foldtype.HeaderForwardedOp, "owner")
		if res.StatusCode == http.StatusNotFound && ctx.Err() == nil {
			runtime.Gosched() // the other node has not read the owner's lease yet
			continue
		}
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Foldstream-Error-Code") != string(foldtype.CodeUnavailable) {
			t.Fatalf("a forwarded pause on a node that does not run the processor: %d %s %s", res.StatusCode,
				res.Header.Get("Foldstream-Error-Code"), body)
		}
		break
	}
	if a := owner.logs.String(); strings.Contains(a, "audit: processor pause") {
		t.Fatalf("the owner was asked:\n%s", a)
	}
	if sts := owner.h.ProcessorsOn(ctx, "/work"); len(sts) != 1 || sts[0].Paused != nil {
		t.Fatalf("the owner's processor: %+v", sts)
	}
	// The node that refused it recorded it, forwarded mark or not: a caller cannot keep a verb out
	// of the audit by sending the mark.
	recs, err := owner.h.Audit(ctx, "/work", "jobs", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Op != "pause" || recs[0].Node != "other" || recs[0].Outcome != "refused: "+string(foldtype.CodeUnavailable) {
		t.Fatalf("the audit of the refused forwarded pause: %+v", recs)
	}
}
