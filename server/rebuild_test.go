package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
)

// stepTally is the state of both versions of the "steps" processor.
type stepTally struct {
	N int `json:"n"`
}

// stepper is processor "steps" at one version: each "e" adds by; its effects are counted per
// offset, per version, in runs (shared by both versions).
type stepper struct {
	foldstream.Base[stepTally]
	by   int
	runs *versionRuns
}

func (p *stepper) Reduce(a foldstream.ReduceArgs[stepTally]) (stepTally, bool, error) {
	return stepTally{N: a.State.N + p.by}, true, nil
}

func (p *stepper) ProcessEvent(a *foldstream.ProcessEventArgs[stepTally]) error {
	if a.Event != nil {
		p.runs.add(p.Contract().Version(), a.Event.Offset)
	}
	return nil
}

type versionRuns struct {
	mu   sync.Mutex
	runs map[string]map[int64]int
}

func (r *versionRuns) add(version string, off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[version] == nil {
		r.runs[version] = map[int64]int{}
	}
	r.runs[version][off]++
}

func (r *versionRuns) of(version string, off int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[version][off]
}

func newStepper(version string, by int, runs *versionRuns) *stepper {
	return &stepper{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[stepTally]{
		Slug: "steps", Version: version, Consumes: []string{"e"},
	})), by: by, runs: runs}
}

// Rebuild v2 beside v1 under load, on SQLite: reads answer throughout; every effect exactly once
// across the switch; v2's state equals the fold.
func TestRebuildBesideTheRunningVersionOverHTTPOnSQLite(t *testing.T) {
	testRebuildUnderLoad(t, filepath.Join(t.TempDir(), "rebuild.db"))
}

// The same on PostgreSQL.
func TestRebuildBesideTheRunningVersionOverHTTPOnPostgres(t *testing.T) {
	testRebuildUnderLoad(t, pgtest.URL(t))
}

// testRebuildUnderLoad: v1 runs "steps" on /orders with a backlog; the program registers v2
// beside it. A read-write token may not rebuild (403); a processor with no next version answers
// 409 CONFLICT. With an ops token the rebuild starts and, while a writer appends, a reader of the
// running version gets 200 every time and a reader of version 2 gets 200 or 503 CATCHING_UP and
// nothing else; the status shows version 2 beside the running one until the switch, then runs
// version 2. In the end every event's effect ran exactly once, by v1 up to the switch and by v2
// after it, v2's state is the fold of the log, and the audit holds the verb.
func testRebuildUnderLoad(t *testing.T, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	n := startOpsNode(t, db, "node", bt)
	runs := &versionRuns{runs: map[string]map[int64]int{}}
	if _, err := host.Register(ctx, n.h, "/orders", newStepper("1", 1, runs)); err != nil {
		t.Fatal(err)
	}
	plain := foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[stepTally]{Slug: "plain", Version: "1", Consumes: []string{"e"}}))
	if _, err := host.Register(ctx, n.h, "/orders", &plain); err != nil {
		t.Fatal(err)
	}
	if err := host.RegisterNextVersion(ctx, n.h, "/orders", newStepper("2", 2, runs)); err != nil {
		t.Fatal(err)
	}
	orders := n.st.Events().Stream("/orders")
	for range 6 { // a backlog of several pages for the rebuild to fold
		batch := make([]foldtype.EventInput, 300)
		for i := range batch {
			batch[i] = foldtype.EventInput{Type: "e"}
		}
		if _, err := orders.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}

	base := n.url + "/v1/processor/steps/orders"
	if res, body := request(t, "POST", base+"?op=rebuild", "", "Authorization", bearer(writerToken)); res.StatusCode != http.StatusForbidden {
		t.Fatalf("rebuild with a read-write token: %d %s", res.StatusCode, body)
	}
	if res, body := request(t, "POST", n.url+"/v1/processor/plain/orders?op=rebuild", "", "Authorization", bearer(opsToken)); res.StatusCode != http.StatusConflict ||
		res.Header.Get(server.HeaderErrorCode) != string(foldtype.CodeConflict) || !strings.Contains(body, "no next version") {
		t.Fatalf("rebuild with no next version: %d %s", res.StatusCode, body)
	}

	var wg sync.WaitGroup
	writing := make(chan struct{})
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		defer close(writing)
		for range 200 {
			if _, err := orders.Append(ctx, foldtype.EventInput{Type: "e"}, foldtype.EventInput{Type: "e"}); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	var mu sync.Mutex
	var readFailures []string
	sawCatchingUp := false
	wg.Add(1)
	go func() { // the readers: the running version, and version 2
		defer wg.Done()
		for {
			select {
			case <-writing:
				return
			default:
			}
			res, body := request(t, "GET", base, "", "Authorization", bearer(readerToken))
			if res.StatusCode != http.StatusOK {
				mu.Lock()
				readFailures = append(readFailures, fmt.Sprintf("running version: %d %s", res.StatusCode, body))
				mu.Unlock()
			}
			res, body = request(t, "GET", base+"?version=2", "", "Authorization", bearer(readerToken))
			switch {
			case res.StatusCode == http.StatusOK:
			case res.StatusCode == http.StatusServiceUnavailable && res.Header.Get(server.HeaderErrorCode) == string(foldtype.CodeCatchingUp):
				mu.Lock()
				sawCatchingUp = true
				mu.Unlock()
			default:
				mu.Lock()
				readFailures = append(readFailures, fmt.Sprintf("version 2: %d %s", res.StatusCode, body))
				mu.Unlock()
			}
		}
	}()

	res, body := request(t, "POST", base+"?op=rebuild&reason=fix+the+totals", "", "Authorization", bearer(opsToken))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("rebuild: %d %s", res.StatusCode, body)
	}
	var ans struct {
		Op, Slug, Stream string
		Rebuild          foldtype.ProcessorRebuild
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Op != "rebuild" || ans.Rebuild.Version != "2" {
		t.Fatalf("the answer %s: %+v %v", body, ans, err)
	}
	switched := wait.For(60*time.Second, func() bool {
		for _, p := range processorsOn(t, n.url, "/orders") {
			if p.Slug == "steps" {
				if p.Version != "2" && p.Rebuilding == nil {
					t.Errorf("status before the switch shows no rebuild beside version %s", p.Version)
				}
				return p.Version == "2" && p.Rebuilding == nil
			}
		}
		return false
	})
	if !switched {
		t.Fatal("the processor did not switch to version 2 within 60s")
	}
	wg.Wait()
	head, err := n.st.Events().HeadStream(ctx, "/orders")
	if err != nil {
		t.Fatal(err)
	}
	last := head.Tail
	if err := n.h.WaitUntilProcessed(ctx, "/orders", "steps", last, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, f := range readFailures {
		t.Error(f)
	}
	if !sawCatchingUp {
		t.Log("no read of version 2 met the rebuild before the switch (it was quick)")
	}

	var logged []foldtype.Event
	for after := int64(0); ; {
		page, err := orders.Read(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		logged = append(logged, page.Events...)
		if page.AtHead || page.ScannedThroughOffset <= after {
			break
		}
		after = page.ScannedThroughOffset
	}
	switchedAt := int64(-1)
	events := 0
	for _, ev := range logged {
		if ev.Type != "e" {
			continue // the stream's wake record
		}
		events++
		n1, n2 := runs.of("1", ev.Offset), runs.of("2", ev.Offset)
		if n1+n2 != 1 {
			t.Fatalf("offset %d: v1 ran its effect %d times, v2 %d; want once in all", ev.Offset, n1, n2)
		}
		if n2 == 1 && switchedAt < 0 {
			switchedAt = ev.Offset
		}
		if n1 == 1 && switchedAt >= 0 {
			t.Fatalf("offset %d: v1 ran its effect after v2 ran offset %d's", ev.Offset, switchedAt)
		}
	}
	res, body = request(t, "GET", base+"?version=2", "", "Authorization", bearer(readerToken))
	var snap struct {
		Offset int64
		State  stepTally
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &snap) != nil {
		t.Fatalf("read of version 2 after the switch: %d %s", res.StatusCode, body)
	}
	if want := 2 * events; snap.State.N != want || snap.Offset < last {
		t.Fatalf("v2's state: got %+v, want n=%d (the fold) through offset %d", snap, want, last)
	}
	res, body = request(t, "GET", base+"?audit=1", "", "Authorization", bearer(opsToken))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"op":"rebuild"`) || !strings.Contains(body, "fix the totals") {
		t.Fatalf("the audit: %d %s", res.StatusCode, body)
	}
}

// processorsOn reads the processors of path from the stream info route.
func processorsOn(t *testing.T, base, path string) []foldtype.ProcessorStatus {
	t.Helper()
	res, body := request(t, "GET", base+"/v1/streams/info?path="+url.QueryEscape(path), "", "Authorization", bearer(readerToken))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("stream info: %d %s", res.StatusCode, body)
	}
	var d struct {
		Processors []foldtype.ProcessorStatus `json:"processors"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("stream info %s: %v", body, err)
	}
	return d.Processors
}
