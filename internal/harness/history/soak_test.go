package history_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/history"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// SoakEnv names the environment variable that runs TestHistorySoakOfMixedNemeses for a while
// (a Go duration, e.g. 10m); without it the test is skipped.
const SoakEnv = "FOLDSTREAM_HISTORY_SOAK"

// TestHistorySoakOfMixedNemeses runs rounds on two nodes sharing a PostgreSQL of the test's own,
// each node behind a proxy from its clients and another to the database. Every round creates
// fresh streams, puts them under load, injects one fault chosen at random (the database
// restarted -m immediate, a node's database connections cut or their answers lost, a node's
// clients cut or their answers lost, a node SIGKILLed and restarted), heals it, and has the
// checker judge the round's history. Run it with
//
//	FOLDSTREAM_HISTORY_SOAK=10m go test -count=1 -timeout 0 -v -run TestHistorySoakOfMixedNemeses ./internal/harness/history/
func TestHistorySoakOfMixedNemeses(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(SoakEnv))
	if err != nil || d <= 0 {
		t.Skipf("set %s to a duration to run the soak", SoakEnv)
	}
	srv := pgtest.StartServer(t)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	type member struct {
		node        *history.Node
		db, clients *history.Proxy
	}
	var ms []member
	var targets []string
	for range 2 {
		dbp := newProxy(t, u.Host)
		via := *u
		via.Host = dbp.Addr()
		n := startNode(t, via.String())
		cp := newProxy(t, n.Addr)
		ms = append(ms, member{node: n, db: dbp, clients: cp})
		targets = append(targets, "http://"+cp.Addr()+"/v1/stream")
	}
	type nemesis struct {
		name   string
		inject func(l *load, i int)
	}
	heal := func(l *load, i int, cut func(), restore func()) {
		cut()
		l.errorsGrow("requests to fail", i, 3)
		restore()
	}
	nemeses := []nemesis{
		{"database restarted -m immediate", func(l *load, _ int) { srv.Restart("immediate") }},
		{"node's database cut", func(l *load, i int) { heal(l, i, ms[i].db.Cut, ms[i].db.Restore) }},
		{"node's database answers lost", func(l *load, i int) { heal(l, i, ms[i].db.DropReplies, ms[i].db.Restore) }},
		{"node's clients cut", func(l *load, i int) { heal(l, i, ms[i].clients.Cut, ms[i].clients.Restore) }},
		{"node's client answers lost", func(l *load, i int) { heal(l, i, ms[i].clients.DropReplies, ms[i].clients.Restore) }},
		{"node SIGKILLed and restarted", func(l *load, i int) {
			if !ms[i].node.Kill() {
				t.Fatalf("node %d: the kill did not end it with SIGKILL", i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), history.StartTimeout)
			defer cancel()
			if err := ms[i].node.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	var total history.Counts
	failed := map[string]int{}
	rounds, start := 0, time.Now()
	for time.Since(start) < d {
		rounds++
		nm, i := nemeses[rand.IntN(len(nemeses))], rand.IntN(len(ms))
		l := startLoadNamed(t, "r"+strconv.Itoa(rounds)+"-", targets...)
		l.progress("appends before the fault", 20)
		nm.inject(l, i)
		l.progress("appends after the fault", 20)
		r := l.finish()
		t.Logf("round %d: %s (node %d): %v", rounds, nm.name, i, r.Verdict)
		total.Ops += r.Counts.Ops
		total.Appends += r.Counts.Appends
		total.Acknowledged += r.Counts.Acknowledged
		total.Unknown += r.Counts.Unknown
		total.TookEffect += r.Counts.TookEffect
		total.Failed += r.Counts.Failed
		total.Reads += r.Counts.Reads
		if r.Verdict != porcupine.Ok {
			failed[nm.name]++
		}
	}
	t.Logf("%d rounds in %v: %v; rounds not linearizable, by fault: %v", rounds, time.Since(start).Round(time.Second), total, failed)
}
