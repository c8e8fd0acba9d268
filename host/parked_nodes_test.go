package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// The cluster case for skip: three node processes on one PostgreSQL database run a
// pattern over 100 streams; one tick of one stream is poison (its ProcessEvent fails while a file
// exists). Every other stream's effects run while that processor fails — none waits for it. A skip
// sent to any node (the owner may be another) moves it past the poison: its later ticks run. The
// parked event is listed from every node. After the fix, a redrive sent to yet another node runs
// its effect. Counted at the external side effect: every tick's effect exactly once (so never on
// two nodes), the poison's only after the redrive.
func TestSkipOnAClusterMovesOnePoisonedStreamOnAndRedriveRunsItsEffectOnce(t *testing.T) {
	db := pgtest.URL(t)
	effects := &effectLog{}
	es := httptest.NewServer(effects)
	defer es.Close()
	poisonFile := filepath.Join(t.TempDir(), "poison")
	if err := os.WriteFile(poisonFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	nodes := startNodes(t, db, 3, ttl, "--advertise", "--effects", es.URL, "--poison-file", poisonFile)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	do := func(method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if body != "" || method == http.MethodPut {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		deadline := time.Now().Add(30 * ttl)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s\n%s", what, 30*ttl, allLogs(nodes))
			}
			<-tk.C
		}
	}
	const streams, poisoned = 100, 42
	path := func(i int) string { return fmt.Sprintf("/counters/s%03d", i) }
	tick := func(i, n int, poison bool) {
		t.Helper()
		body := fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d,"poison":%v}}`, n, poison)
		if code, b := do(http.MethodPost, nodes[(i+n)%len(nodes)].url()+"/v1/stream"+path(i), body); code/100 != 2 {
			t.Fatalf("append %d to %s: %d %s", n, path(i), code, b)
		}
	}
	// count is how often the effect of tick n of stream i ran, and on which nodes.
	count := func(i, n int) (int, map[string]bool) {
		c, on := 0, map[string]bool{}
		for _, e := range effects.snapshot() {
			if e.Path == path(i) && e.N == n {
				c++
				on[e.Node] = true
			}
		}
		return c, on
	}
	for i := range streams {
		if code, b := do(http.MethodPut, nodes[i%len(nodes)].url()+"/v1/stream"+path(i), ""); code/100 != 2 {
			t.Fatalf("create %s: %d %s", path(i), code, b)
		}
	}
	// Round by round, so that a tick's effect has run before the next lands (a failing range runs
	// again whole: the poison's own range holds nothing before it).
	for n := range 3 {
		for i := range streams {
			tick(i, n, i == poisoned && n == 1)
		}
		if n == 0 {
			until("every first tick's effect", func() bool { return len(effects.snapshot()) >= streams })
		}
	}
	// Every stream but the poisoned one runs all three ticks while that one fails.
	until("every other stream's ticks", func() bool {
		for i := range streams {
			if i == poisoned {
				continue
			}
			for n := range 3 {
				if c, _ := count(i, n); c == 0 {
					return false
				}
			}
		}
		return true
	})
	base := func(nd *node) string { return nd.url() + "/v1/processor/counter" + path(poisoned) }
	until("the poisoned stream's processor failing", func() bool {
		code, _ := do(http.MethodGet, base(nodes[0])+"?waitUntilProcessed=1000000&timeout=1s", "")
		return code == http.StatusServiceUnavailable
	})
	if c, _ := count(poisoned, 1); c != 0 {
		t.Fatalf("the poison's effect ran %d times while it fails", c)
	}
	if c, _ := count(poisoned, 2); c != 0 {
		t.Fatalf("a tick behind the poison ran before the skip")
	}

	// Skip, sent to every node in turn until one answers (a node whose view of the lease is
	// behind a move answers 503 and is asked again).
	var skipped struct {
		Parked foldtype.ParkedEvent `json:"parked"`
	}
	until("a skip answered", func() bool {
		for _, nd := range nodes {
			code, b := do(http.MethodPost, base(nd)+"?op=skip&reason=poison+tick", "")
			if code == http.StatusOK {
				if err := json.Unmarshal([]byte(b), &skipped); err != nil {
					t.Fatalf("skip's answer: %s", b)
				}
				return true
			}
			if code != http.StatusServiceUnavailable {
				t.Fatalf("skip on %s: %d %s", nd.name, code, b)
			}
		}
		return false
	})
	if skipped.Parked.Type != "ticked" || skipped.Parked.Reason != "poison tick" || skipped.Parked.Code == "" {
		t.Fatalf("parked: %+v", skipped.Parked)
	}
	tick(poisoned, 3, false)
	until("the ticks behind the poison", func() bool {
		c2, _ := count(poisoned, 2)
		c3, _ := count(poisoned, 3)
		return c2 == 1 && c3 == 1
	})
	for _, nd := range nodes {
		code, b := do(http.MethodGet, base(nd)+"?parked=1", "")
		var list struct {
			Parked []foldtype.ParkedEvent `json:"parked"`
		}
		if err := json.Unmarshal([]byte(b), &list); code != http.StatusOK || err != nil || len(list.Parked) != 1 ||
			list.Parked[0].Offset != skipped.Parked.Offset {
			t.Fatalf("parked listed by %s: %d %s", nd.name, code, b)
		}
	}
	if c, _ := count(poisoned, 1); c != 0 {
		t.Fatalf("the skipped poison's effect ran %d times", c)
	}

	// The fix, then a redrive through any node.
	if err := os.Remove(poisonFile); err != nil {
		t.Fatal(err)
	}
	until("a redrive answered", func() bool {
		for k := range nodes {
			nd := nodes[(k+1)%len(nodes)]
			code, b := do(http.MethodPost, base(nd)+"?op=redrive&reason=fixed", "")
			if code == http.StatusOK {
				if !strings.Contains(b, fmt.Sprintf(`"redriven":[%d]`, skipped.Parked.Offset)) {
					t.Fatalf("redrive's answer: %s", b)
				}
				return true
			}
			if code != http.StatusServiceUnavailable {
				t.Fatalf("redrive on %s: %d %s", nd.name, code, b)
			}
		}
		return false
	})
	for _, nd := range nodes {
		if code, b := do(http.MethodGet, base(nd)+"?parked=1", ""); code != http.StatusOK || strings.TrimSpace(b) != `{"parked":[]}` {
			t.Fatalf("parked after the redrive, on %s: %d %s", nd.name, code, b)
		}
	}
	for i := range streams {
		last := 2
		if i == poisoned {
			last = 3
		}
		for n := 0; n <= last; n++ {
			if c, on := count(i, n); c != 1 {
				t.Fatalf("%s tick %d: its effect ran %d times (on %v), want once", path(i), n, c, on)
			}
		}
	}
}
