package history_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
)

// TestAnSSEReaderOnANodeWhoseDatabaseAnswersAreLostIsNeverToldAStaleTailIsUpToDate is the SSE
// twin of the long-poll case: node B's SSE keep-alive control events say upToDate at the tail B
// knows, which its tail cache learns of by notification. While B's database answers are lost, no
// notification arrives; once node A acknowledged an append past that tail, a control event from B
// must not claim the old tail is up to date (a reader that stops at upToDate would miss the append).
func TestAnSSEReaderOnANodeWhoseDatabaseAnswersAreLostIsNeverToldAStaleTailIsUpToDate(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	p := newProxy(t, pgURL(t, db).Host)
	via := *pgURL(t, db)
	via.Host = p.Addr()
	a, b := startNode(t, db), startNode(t, via.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	post := func(method, url, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		res.Body.Close()
		return res
	}
	if res := post(http.MethodPut, a.URL()+"/s", ""); res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", res.StatusCode)
	}
	o1 := post(http.MethodPost, a.URL()+"/s", `"m1"`).Header.Get("Stream-Next-Offset")

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL()+"/s?live=sse&offset="+o1, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("SSE on B: %v %v", res, err)
	}
	defer res.Body.Close()
	type control struct {
		at       time.Time
		next     string
		upToDate bool
	}
	controls := make(chan control, 64)
	go func() {
		defer close(controls)
		sc := bufio.NewScanner(res.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data:") && event == "control":
				var c struct {
					Next     string `json:"streamNextOffset"`
					UpToDate bool   `json:"upToDate"`
				}
				if json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")), &c) == nil {
					controls <- control{time.Now(), c.Next, c.UpToDate}
				}
			}
		}
	}()
	// B has told its reader the tail once, from its cache (now current).
	if c, ok := <-controls; !ok || c.next != o1 {
		t.Fatalf("first control on B: %+v %v, want next %s", c, ok, o1)
	}
	p.DropReplies()
	defer p.Restore()
	acked := post(http.MethodPost, a.URL()+"/s", `"m2"`)
	if acked.StatusCode != http.StatusNoContent {
		t.Fatalf("append m2 via A: %d", acked.StatusCode)
	}
	ackedAt := time.Now()
	// Watch B's controls for three keep-alive intervals (the nodes run --long-poll-timeout 1s).
	until := time.After(3500 * time.Millisecond)
	for {
		select {
		case c, ok := <-controls:
			if !ok {
				return // B ended the connection: the reader reconnects, no false claim was made
			}
			if c.at.After(ackedAt) && c.upToDate && c.next == o1 {
				t.Fatalf("B claimed the stale tail %s up to date %v after A acknowledged an append past it", o1, c.at.Sub(ackedAt))
			}
		case <-until:
			return
		}
	}
}
