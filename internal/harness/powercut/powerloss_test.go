package powercut_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/powercut"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// The power-loss tests run the real store (package stream over the SQLite driver) on a power-cut
// mount, append under load from several writers, cut the power at a random moment, and open the
// store again on what a disk would still hold. A checker compares what survived with every
// append the store acknowledged. Each round starts from the previous round's survivors, so the
// database grows across cuts and every reopen recovers a write-ahead log cut in a new place.

// TestMain serves the power-cut file system when the test binary is started as its process.
func TestMain(m *testing.M) {
	powercut.ServeIfChild()
	code := m.Run()
	if serverBin != "" {
		os.RemoveAll(filepath.Dir(serverBin)) // the foldstream binary the server tests built
	}
	os.Exit(code)
}

const (
	dbName  = "s.db"
	writers = 4
	streams = 2
)

// cutRun configures a series of power cuts.
type cutRun struct {
	cuts        int
	synchronous string                    // sqlitedriver.SyncFull or SyncNormal
	mode        func(i int) powercut.Mode // what the i-th cut keeps
	lie         func(i int) bool          // whether the i-th round's disk lies about fsync
	seed        uint64
	maxAcks     int // each round cuts after a random number of acknowledged appends in [5, maxAcks]
}

// cutResult is what a series of cuts found.
type cutResult struct {
	acked       int      // appends acknowledged over all rounds
	lost        int      // acknowledged appends missing (or changed) after a cut
	lostInRound []int    // per cut
	violations  []string // everything the checker rejected, the first losses of each check included
	other       int      // violations other than losses: gaps, duplicates, payloads never sent
	corrupt     int      // integrity checks that did not answer ok
	fsyncs      powercut.Stats
	kept        int // unsynced pages a cut kept
	dropped     int // unsynced pages a cut dropped
	phases      map[string]time.Duration
}

// history is every append the writers sent and every one the store acknowledged.
type ackHistory struct {
	mu    sync.Mutex
	sent  map[string]bool             // payloads sent, acknowledged or not
	acked map[string]map[int64]string // stream → offset → payload, acknowledged or seen durable
}

func (h *ackHistory) ack(path string, offset int64, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.acked[path] == nil {
		h.acked[path] = map[int64]string{}
	}
	h.acked[path][offset] = payload
}

// check compares the streams read after a cut with the history: every acknowledged append is
// there at its offset with its payload, offsets run 1..n with no gap, every event is one a writer
// sent, and none appears twice. It returns the violations and how many acknowledged appends were
// lost, then takes what was read as the new durable history (an append in flight at the cut may
// have survived; from now on it must stay).
func (h *ackHistory) check(got map[string][]foldtype.Event) (violations []string, lost int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]string{}
	for path, evs := range got {
		for i, e := range evs {
			p := string(e.Payload)
			if e.Offset != int64(i+1) {
				violations = append(violations, fmt.Sprintf("%s: event %d has offset %d (a gap or a reorder)", path, i+1, e.Offset))
			}
			if !h.sent[p] {
				violations = append(violations, fmt.Sprintf("%s@%d: payload %s was never sent", path, e.Offset, p))
			}
			if where, dup := seen[p]; dup {
				violations = append(violations, fmt.Sprintf("%s@%d: payload %s also at %s", path, e.Offset, p, where))
			}
			seen[p] = fmt.Sprintf("%s@%d", path, e.Offset)
		}
	}
	paths := make([]string, 0, len(h.acked))
	for path := range h.acked {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	for _, path := range paths {
		byOffset := map[int64]string{}
		for _, e := range got[path] {
			byOffset[e.Offset] = string(e.Payload)
		}
		for off, want := range h.acked[path] {
			if have, ok := byOffset[off]; !ok || have != want {
				lost++
				if lost <= 20 {
					violations = append(violations, fmt.Sprintf("%s@%d: acknowledged %s, found %q", path, off, want, have))
				}
			}
		}
	}
	h.acked = map[string]map[int64]string{}
	for path, evs := range got {
		h.acked[path] = map[int64]string{}
		for _, e := range evs {
			h.acked[path][e.Offset] = string(e.Payload)
		}
	}
	return violations, lost
}

// runPowerCuts runs cfg.cuts rounds of appends each ended by a power cut, checking after each.
func runPowerCuts(t *testing.T, cfg cutRun) cutResult {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(cfg.seed, 33))
	h := &ackHistory{sent: map[string]bool{}, acked: map[string]map[int64]string{}}
	var res cutResult
	res.fsyncs.Synced = map[string]int64{}
	res.phases = map[string]time.Duration{}
	base := t.TempDir()
	survivors := ""
	srv, err := powercut.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("the file system's process: %v", err)
		}
	})
	for i := range cfg.cuts {
		dir := filepath.Join(base, strconv.Itoa(i))
		mnt, backing, dst := filepath.Join(dir, "mnt"), filepath.Join(dir, "backing"), filepath.Join(dir, "survivors")
		for _, d := range []string{mnt, backing, dst} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		phase := time.Now()
		lap := func(name string) {
			res.phases[name] += time.Since(phase)
			phase = time.Now()
		}
		pfs, err := srv.Mount(mnt, backing, powercut.Options{Initial: survivors, LieAboutFsync: cfg.lie != nil && cfg.lie(i)})
		if err != nil {
			msg := "FUSE is not usable on this machine (needs /dev/fuse, fusermount3 from Debian's fuse3 or root): " + err.Error()
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		unmounted := false
		unmount := func() {
			if !unmounted {
				unmounted = true
				if err := pfs.Unmount(); err != nil {
					t.Errorf("round %d: unmount: %v", i, err)
				}
			}
		}
		t.Cleanup(unmount)

		lap("mount")
		path := filepath.Join(mnt, dbName)
		s := openStore(t, path, cfg.synchronous)
		lap("open")
		if i > 0 {
			res.checkRound(t, ctx, s, path, h, i)
		}
		lap("check")
		target := 5 + rng.IntN(max(1, cfg.maxAcks-4))
		mode := cfg.mode(i)
		cutSeed := rng.Uint64()
		rep := appendUntilCut(t, s, h, i, target, func() (powercut.CutReport, error) {
			return pfs.Cut(dst, mode, cutSeed)
		}, &res.acked)
		res.kept += rep.KeptPages
		res.dropped += rep.DroppedPages
		st, err := pfs.Stats()
		if err != nil {
			t.Fatal(err)
		}
		res.fsyncs.FileSyncs += st.FileSyncs
		res.fsyncs.DirSyncs += st.DirSyncs
		res.fsyncs.Writes += st.Writes
		for k, v := range st.Synced {
			res.fsyncs.Synced[k] += v
		}
		lap("append+cut+close")
		unmount()
		lap("unmount")
		survivors = dst
	}
	// The last cut's survivors, opened on an ordinary directory.
	final := filepath.Join(base, "final")
	if err := os.CopyFS(final, os.DirFS(survivors)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(final, dbName)
	s := openStore(t, path, cfg.synchronous)
	res.checkRound(t, ctx, s, path, h, cfg.cuts)
	if err := s.Close(ctx); err != nil {
		t.Errorf("close the recovered store: %v", err)
	}
	return res
}

func openStore(t *testing.T, path, synchronous string) *stream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: path, Synchronous: synchronous})
	if err != nil {
		t.Fatalf("open the store on the survivors of the last cut: %v", err)
	}
	s, err := stream.OpenDriver(ctx, d, stream.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.Close()
		t.Fatalf("open the store on the survivors of the last cut: %v", err)
	}
	return s
}

// checkRound reads every stream of the store opened after cut number round, hands them to the
// checker, and runs SQLite's integrity check on the file.
func (res *cutResult) checkRound(t *testing.T, ctx context.Context, s *stream.Store, path string, h *ackHistory, round int) {
	t.Helper()
	got := map[string][]foldtype.Event{}
	for k := range streams {
		p := fmt.Sprintf("/power/%d", k)
		after := int64(0)
		for {
			page, err := s.Events().Stream(p).Read(ctx, after, 1000)
			if err != nil {
				t.Fatalf("after cut %d: read %s: %v", round, p, err)
			}
			got[p] = append(got[p], page.Events...)
			if n := len(page.Events); n > 0 {
				after = page.Events[n-1].Offset
			}
			if page.AtHead {
				break
			}
		}
	}
	violations, lost := h.check(got)
	res.other += len(violations) - min(lost, 20)
	res.lost += lost
	res.lostInRound = append(res.lostInRound, lost)
	for _, v := range violations {
		res.violations = append(res.violations, fmt.Sprintf("after cut %d: %s", round, v))
	}
	if verdict := integrityCheck(t, path); verdict != "ok" {
		res.corrupt++
		res.violations = append(res.violations, fmt.Sprintf("after cut %d: integrity_check: %s", round, verdict))
	}
}

// integrityCheck runs PRAGMA integrity_check on a connection of its own, beside the open store.
func integrityCheck(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("PRAGMA integrity_check")
	if err != nil {
		return "error: " + err.Error()
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "error: " + err.Error()
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		return "error: " + err.Error()
	}
	return strings.Join(lines, "; ")
}

// appendUntilCut runs the writers until target appends were acknowledged in this round, cuts the
// power while they are still appending, stops them and closes the store.
func appendUntilCut(t *testing.T, s *stream.Store, h *ackHistory, round, target int,
	cut func() (powercut.CutReport, error), acked *int) powercut.CutReport {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		n       atomic.Int64
		cutting atomic.Bool
		reached = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
		errsMu  sync.Mutex
		errs    []error
		ackedN  atomic.Int64
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
			p := fmt.Sprintf("/power/%d", w%streams)
			for k := 0; ctx.Err() == nil; k++ {
				batch := make([]foldtype.EventInput, 1+rng.IntN(3))
				for j := range batch {
					payload, _ := json.Marshal(map[string]int{"r": round, "w": w, "k": k, "j": j})
					h.mu.Lock()
					h.sent[string(payload)] = true
					h.mu.Unlock()
					batch[j] = foldtype.EventInput{Type: "put", Payload: payload}
				}
				got, err := s.Events().Stream(p).Append(ctx, batch...)
				if err != nil {
					if !cutting.Load() {
						errsMu.Lock()
						errs = append(errs, fmt.Errorf("writer %d: append before the cut: %w", w, err))
						errsMu.Unlock()
					}
					return
				}
				for j, e := range got {
					h.ack(p, e.Offset, string(batch[j].Payload))
				}
				ackedN.Add(int64(len(got)))
				if n.Add(1) >= int64(target) {
					once.Do(func() { close(reached) })
				}
			}
		})
	}
	var rep powercut.CutReport
	select {
	case <-reached:
		cutting.Store(true)
		var err error
		if rep, err = cut(); err != nil {
			t.Fatalf("round %d: cut: %v", round, err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("round %d: %d of %d appends acknowledged in 2 minutes", round, n.Load(), target)
	}
	cancel()
	if !waitFor(func() { wg.Wait() }, time.Minute) {
		t.Fatalf("round %d: the writers did not stop within a minute of the cut", round)
	}
	closed := waitFor(func() { s.Close(context.Background()) }, time.Minute) // errors expected: the disk is gone
	if !closed {
		t.Fatalf("round %d: the store did not close within a minute of the cut", round)
	}
	*acked += int(ackedN.Load())
	for _, err := range errs {
		t.Error(err)
	}
	return rep
}

// waitFor runs fn and reports whether it returned within d.
func waitFor(fn func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("FOLDSTREAM_POWER_CUT_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FOLDSTREAM_POWER_CUT_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (FOLDSTREAM_POWER_CUT_SEED to replay the same cut points and survivors)", s)
	return s
}

func alternate(i int) powercut.Mode {
	if i%2 == 0 {
		return powercut.KeepSynced
	}
	return powercut.KeepSyncedAndSomeUnsynced
}

func logResult(t *testing.T, cfg cutRun, res cutResult, took time.Duration) {
	t.Helper()
	t.Logf("%d cuts at synchronous=%s in %v: %d appends acknowledged, %d lost, %d corrupt files; "+
		"%d writes, %d file fsyncs (%v), %d directory fsyncs; unsynced pages at the cuts: %d dropped, %d kept",
		cfg.cuts, cfg.synchronous, took.Round(time.Millisecond), res.acked, res.lost, res.corrupt,
		res.fsyncs.Writes, res.fsyncs.FileSyncs, res.fsyncs.Synced, res.fsyncs.DirSyncs, res.dropped, res.kept)
	t.Logf("time by phase: %v", res.phases)
}

// TestNoAcknowledgedAppendIsLostAtAPowerCut: at synchronous=FULL, every append the store
// acknowledged is there after a power cut, at its offset with its payload, with no gap, and the
// file passes SQLite's integrity check — whether the cut keeps only fsynced bytes or also a random
// half of the pages written since. FOLDSTREAM_POWER_CUTS sets the number of cuts (20 by default),
// FOLDSTREAM_POWER_CUT_ACKS the most appends acknowledged in a round before its cut (150).
func TestNoAcknowledgedAppendIsLostAtAPowerCut(t *testing.T) {
	cfg := cutRun{
		cuts:        envInt(t, "FOLDSTREAM_POWER_CUTS", 20),
		synchronous: sqlitedriver.SyncFull,
		mode:        alternate,
		seed:        seed(t),
		maxAcks:     envInt(t, "FOLDSTREAM_POWER_CUT_ACKS", 150),
	}
	start := time.Now()
	res := runPowerCuts(t, cfg)
	logResult(t, cfg, res, time.Since(start))
	for _, v := range res.violations {
		t.Error(v)
	}
	if res.acked < cfg.cuts*5 {
		t.Fatalf("only %d appends acknowledged over %d cuts", res.acked, cfg.cuts)
	}
}

// TestTheCheckerSeesAppendsLostToADiskThatLiesAboutFsync is the positive control: the same run on
// a disk that answers fsync without making anything durable must be judged a loss.
func TestTheCheckerSeesAppendsLostToADiskThatLiesAboutFsync(t *testing.T) {
	cfg := cutRun{
		cuts:        2,
		synchronous: sqlitedriver.SyncFull,
		mode:        func(int) powercut.Mode { return powercut.KeepSynced },
		lie:         func(i int) bool { return i == 1 },
		seed:        seed(t),
		maxAcks:     40,
	}
	res := runPowerCuts(t, cfg)
	logResult(t, cfg, res, 0)
	if res.lostInRound[0] != 0 {
		t.Fatalf("the honest round lost %d acknowledged appends: %v", res.lostInRound[0], res.violations)
	}
	if res.lostInRound[1] == 0 {
		t.Fatalf("the checker found no loss after a round on a disk that lies about fsync; violations: %v", res.violations)
	}
}

// TestSynchronousNormalLosesAcknowledgedAppendsAtAPowerCut measures what synchronous=NORMAL
// (never the default) loses: in WAL mode it fsyncs the log only at checkpoints, so the appends
// acknowledged since the last checkpoint are lost when the cut keeps only fsynced bytes. The same
// checker must see the loss. FOLDSTREAM_POWER_CUTS_NORMAL sets the number of cuts (4 by default).
func TestSynchronousNormalLosesAcknowledgedAppendsAtAPowerCut(t *testing.T) {
	cfg := cutRun{
		cuts:        envInt(t, "FOLDSTREAM_POWER_CUTS_NORMAL", 4),
		synchronous: sqlitedriver.SyncNormal,
		mode:        func(int) powercut.Mode { return powercut.KeepSynced },
		seed:        seed(t),
		maxAcks:     envInt(t, "FOLDSTREAM_POWER_CUT_ACKS", 150),
	}
	start := time.Now()
	res := runPowerCuts(t, cfg)
	logResult(t, cfg, res, time.Since(start))
	t.Logf("lost per cut: %v; corrupt files: %d; other violations: %d", res.lostInRound, res.corrupt, res.other)
	if res.other != 0 || res.corrupt != 0 {
		t.Errorf("synchronous=NORMAL may lose the last commits, nothing else: %v", res.violations)
	}
	if res.lost == 0 {
		t.Fatalf("synchronous=NORMAL lost nothing over %d cuts keeping only fsynced bytes; the checker or the cut is broken", cfg.cuts)
	}
}
