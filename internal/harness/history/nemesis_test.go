package history_test

import (
	"context"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/freeport"
	"github.com/foldstream/foldstream/internal/harness/history"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/jackc/pgx/v5"
)

// The nemesis tests run real `foldstream serve` processes under a load of concurrent clients,
// inject one fault while the load runs, and leave the verdict to the checker: the history of
// every client's operations must be linearizable. Each asserts that its fault happened (the
// positive control) and logs the history's counts.

var (
	buildOnce sync.Once
	serverBin string
	buildErr  error
)

func foldstreamBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "history-bin-")
		if err != nil {
			buildErr = err
			return
		}
		serverBin, buildErr = history.BuildServer(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return serverBin
}

// startNode starts a `foldstream serve` on db; it is killed when the test ends.
func startNode(t *testing.T, db string, args ...string) *history.Node {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	n := &history.Node{Bin: foldstreamBin(t), DB: db, Addr: addr,
		Args: append([]string{"--long-poll-timeout", "1s"}, args...)}
	ctx, cancel := context.WithTimeout(context.Background(), history.StartTimeout)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Kill()
		if t.Failed() {
			t.Logf("node %s log:\n%s", n.Addr, n.Logs())
		}
	})
	return n
}

func newProxy(t *testing.T, target string) *history.Proxy {
	t.Helper()
	p, err := history.NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// load is a workload running in the background.
type load struct {
	t    *testing.T
	w    *history.Workload
	stop context.CancelFunc
	done chan struct{}
}

// startLoad creates a few streams through targets and starts clients on them.
func startLoad(t *testing.T, targets ...string) *load {
	t.Helper()
	return startLoadNamed(t, "h", targets...)
}

// startLoadNamed is startLoad on streams named prefix0, prefix1, ...
func startLoadNamed(t *testing.T, prefix string, targets ...string) *load {
	t.Helper()
	return startLoadWith(t, func(w *history.Workload) { w.Prefix = prefix }, targets...)
}

// startLoadWith is startLoad with the workload changed by set.
func startLoadWith(t *testing.T, set func(*history.Workload), targets ...string) *load {
	t.Helper()
	w := &history.Workload{Targets: targets, Prefix: "h", Streams: 3, Writers: 2, Producers: 1, Readers: 2,
		Timeout: 3 * time.Second}
	set(w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Create(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	l := &load{t: t, w: w, stop: stop, done: make(chan struct{})}
	go func() { defer close(l.done); w.Run(lctx) }()
	t.Cleanup(func() { stop(); <-l.done })
	return l
}

func (l *load) acknowledged() int {
	return history.CountOf(l.w.Rec.Operations()).Acknowledged
}

// waitFor polls cond until it holds, failing the test after 30 s.
func (l *load) waitFor(what string, cond func() bool) {
	l.t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			l.t.Fatalf("waited 30 s for %s (%v)", what, history.CountOf(l.w.Rec.Operations()))
		case <-tick.C:
		}
	}
}

// progress waits until n more appends have been acknowledged.
func (l *load) progress(what string, n int) {
	l.t.Helper()
	from := l.acknowledged()
	l.waitFor(what, func() bool { return l.acknowledged() >= from+n })
}

// errorsGrow waits until target's requests have failed n more times.
func (l *load) errorsGrow(what string, target, n int) {
	l.t.Helper()
	from := l.w.Errors(target)
	l.waitFor(what, func() bool { return l.w.Errors(target) >= from+int64(n) })
}

// finish stops the clients, reads every stream once more, and has the checker judge the
// history.
func (l *load) finish() history.Result {
	l.t.Helper()
	l.stop()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.w.FinalReads(ctx); err != nil {
		l.t.Fatal(err)
	}
	ops := l.w.Rec.Operations()
	start := time.Now()
	r := history.Check(ops, 60*time.Second, os.TempDir())
	l.t.Logf("history: %v; checked in %v: %v", r.Counts, time.Since(start).Round(time.Millisecond), r.Verdict)
	switch r.Verdict {
	case porcupine.Ok:
	case porcupine.Illegal:
		l.t.Errorf("the history is not linearizable (rendered at %s):\n%s", r.Visualization, r.Explanation)
	default:
		l.t.Errorf("the checker ran out of time on %v", r.Counts)
	}
	if r.Counts.Acknowledged == 0 {
		l.t.Error("no append was acknowledged: the history checks nothing")
	}
	return r
}

func pgURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func postmasterStart(t *testing.T, url string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var at time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func TestHistoryStaysLinearizableWhenPostgresRestartsImmediatelyUnderLoad(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	a, b := startNode(t, srv.URL()), startNode(t, srv.URL())
	l := startLoad(t, a.URL(), b.URL())
	l.progress("appends before the restart", 30)
	before, errs := postmasterStart(t, srv.URL()), l.w.TotalErrors()
	srv.Restart("immediate")
	if after := postmasterStart(t, srv.URL()); !after.After(before) {
		t.Fatalf("positive control: the postmaster started at %v before and %v after pg_ctl restart", before, after)
	}
	l.progress("appends after the restart", 30)
	if l.w.TotalErrors() == errs {
		t.Error("positive control: no request failed across the database's restart")
	}
	l.finish()
}

func TestHistoryStaysLinearizableWhenANodeLosesPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	u := pgURL(t, db)
	// Node 0 reaches PostgreSQL through a proxy the test cuts; node 1 directly.
	p := newProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = p.Addr()
	a, b := startNode(t, viaProxy.String()), startNode(t, db)
	l := startLoad(t, a.URL(), b.URL())
	l.progress("appends before the cut", 30)

	// Connections closed and refused.
	p.Cut()
	l.errorsGrow("node 0 to fail requests while cut off", 0, 5)
	p.Restore()
	l.progress("appends after the cut", 30)

	// Statements delivered, answers lost: COMMITs whose outcome the node cannot know.
	p.DropReplies()
	l.errorsGrow("node 0 to fail requests while its answers are lost", 0, 5)
	p.Restore()
	l.progress("appends after the lost answers", 30)
	l.finish()
}

func TestHistoryStaysLinearizableWhenClientsLoseTheirNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, t.TempDir()+"/h.db")
	p := newProxy(t, n.Addr)
	l := startLoad(t, "http://"+p.Addr()+"/v1/stream")
	l.progress("appends before the cut", 30)
	for range 2 {
		p.Cut()
		l.errorsGrow("requests to fail while cut off", 0, 5)
		p.Restore()
		l.progress("appends after the cut", 20)
	}
	// Requests delivered, answers lost: appends that took effect unknown to their clients.
	p.DropReplies()
	l.errorsGrow("requests to go unanswered", 0, 5)
	p.Restore()
	l.progress("appends after the lost answers", 20)
	r := l.finish()
	if r.Counts.Unknown == 0 {
		t.Error("positive control: no append's answer was lost")
	}
}

func TestHistoryStaysLinearizableWhenANodeIsKilledAndRestarted(t *testing.T) {
	t.Parallel()
	n := startNode(t, t.TempDir()+"/h.db")
	killAndRestart(t, startLoad(t, n.URL()), n, 0)
}

func TestHistoryStaysLinearizableWhenANodeOfTwoOnPostgresIsKilledAndRestarted(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	a, b := startNode(t, db), startNode(t, db)
	killAndRestart(t, startLoad(t, a.URL(), b.URL()), a, 0)
}

// killAndRestart SIGKILLs node n (the load's target i) twice under load, starting it again after
// each kill, and checks the history.
func killAndRestart(t *testing.T, l *load, n *history.Node, i int) {
	t.Helper()
	l.progress("appends before the kill", 30)
	for k := range 2 {
		if !n.Kill() {
			t.Fatalf("positive control: kill %d did not end the node with SIGKILL", k+1)
		}
		l.errorsGrow("requests to fail while the node is down", i, 1)
		ctx, cancel := context.WithTimeout(context.Background(), history.StartTimeout)
		err := n.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		l.progress("appends after the restart", 30)
	}
	l.finish()
}
