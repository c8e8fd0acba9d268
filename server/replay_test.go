package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
)

// effectTally counts the "job" events a replayCounter reduced.
type effectTally struct {
	N int `json:"n"`
}

// replayCounter counts its ProcessEvent runs per offset.
type replayCounter struct {
	foldstream.Base[effectTally]
	mu   sync.Mutex
	runs map[int64]int
}

func (p *replayCounter) Reduce(a foldstream.ReduceArgs[effectTally]) (effectTally, bool, error) {
	return effectTally{N: a.State.N + 1}, true, nil
}

func (p *replayCounter) ProcessEvent(a *foldstream.ProcessEventArgs[effectTally]) error {
	if a.Event != nil {
		p.mu.Lock()
		p.runs[a.Event.Offset]++
		p.mu.Unlock()
	}
	return nil
}

func (p *replayCounter) runsOf(off int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[off]
}

// On PostgreSQL, a replay sent over HTTP to a node that does not run the processor is asked of the
// node that does, with the operator's token: the answer says what the owner replayed (from,
// through, effects), each effect from the offset on runs exactly once more on the owner and the
// earlier ones do not, and both nodes' logs hold the audit line with the replay's parameters. A
// read-write token is refused with 403, a malformed offset with 400 BAD_REQUEST, an offset after
// what the processor processed with 409 CONFLICT.
func TestAReplaySentToAnotherNodeRunsOnTheOwner(t *testing.T) {
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bt, err := server.ParseBearerTokens(testTokens + "carol ops " + opsToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	owner := startOpsNode(t, db, "owner", bt)
	other := startOpsNode(t, db, "other", bt) // runs no processor: it can only ask the owner
	p := &replayCounter{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[effectTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"},
	})), runs: map[int64]int{}}
	if _, err := host.Register(ctx, owner.h, "/work", p); err != nil {
		t.Fatal(err)
	}
	var jobs []foldtype.EventInput
	for range 6 {
		jobs = append(jobs, foldtype.EventInput{Type: "job"})
	}
	got, err := owner.st.Events().Stream("/work").Append(ctx, jobs...)
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1].Offset
	if err := owner.h.WaitUntilProcessed(ctx, "/work", "jobs", last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	from := got[3].Offset
	base := other.url + "/v1/processor/jobs/work?op=replay&reason=downstream+lost+data"
	if res, body := request(t, "POST", base+"&from=3&effects=again", "", "Authorization", bearer(writerToken)); res.StatusCode != http.StatusForbidden {
		t.Fatalf("replay with a read-write token: %d %s", res.StatusCode, body)
	}
	if res, body := request(t, "POST", base+"&from=three", "", "Authorization", bearer(opsToken)); res.StatusCode != http.StatusBadRequest ||
		res.Header.Get(server.HeaderErrorCode) != string(foldtype.CodeBadRequest) {
		t.Fatalf("replay from a malformed offset: %d %s", res.StatusCode, body)
	}
	if res, body := request(t, "POST", owner.url+"/v1/processor/jobs/work?op=replay&from=1000", "", "Authorization", bearer(opsToken)); res.StatusCode != http.StatusConflict {
		t.Fatalf("replay from after the processed offset: %d %s", res.StatusCode, body)
	}
	var ans struct {
		Op, Slug, Stream string
		From, Through    int64
		Effects          string
	}
	for {
		// The other node learns of the owner's lease on its next scan: until then the processor is
		// unknown there (404 NOT_REGISTERED).
		res, body := request(t, "POST", base+"&from="+strconv.FormatInt(from, 10)+"&effects=again", "", "Authorization", bearer(opsToken))
		if res.StatusCode == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &ans); err != nil {
				t.Fatalf("the answer %s: %v", body, err)
			}
			break
		}
		if res.StatusCode != http.StatusNotFound || ctx.Err() != nil {
			t.Fatalf("replay through the other node: %d %s", res.StatusCode, body)
		}
		runtime.Gosched()
	}
	if ans.Op != "replay" || ans.Slug != "jobs" || ans.Stream != "work" || ans.From != from || ans.Through < last || ans.Effects != "again" {
		t.Fatalf("the answer: %+v", ans)
	}
	if err := owner.h.WaitUntilProcessed(ctx, "/work", "jobs", last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, ev := range got {
		want := 1
		if ev.Offset >= from {
			want = 2
		}
		if n := p.runsOf(ev.Offset); n != want {
			t.Fatalf("ProcessEvent of offset %d ran %d times, want %d", ev.Offset, n, want)
		}
	}
	for _, n := range []*opsNode{owner, other} {
		if a := n.logs.String(); !strings.Contains(a, "audit: processor replay") || !strings.Contains(a, "actor=carol") ||
			!strings.Contains(a, "outcome=done") || !strings.Contains(a, "from="+strconv.FormatInt(from, 10)) || !strings.Contains(a, "effects=again") ||
			!strings.Contains(a, `reason="downstream lost data"`) {
			t.Fatalf("the audit lines of a node:\n%s", a)
		}
	}
}
