package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
)

// An operator who sends a verb with the mark nodes put on a verb they pass on
// (Foldstream-Forwarded-Op) still leaves an audit record: the node that takes a verb stores its
// record whoever sent it, so the header cannot hide a pause from the audit. The answer says it
// stored the record (Foldstream-Op-Recorded), as it does to a node that passed the verb on.
func TestAVerbSentWithTheForwardedMarkIsStillAudited(t *testing.T) {
	ctx := context.Background()
	_, h, ts := opsServer(t, nil, host.Config{}, "mallory", server.Config{})
	p := &poisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[poisonTally]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"},
	}))}
	if _, err := host.Register(ctx, h, "/work", p); err != nil {
		t.Fatal(err)
	}
	res, body := request(t, "POST", ts.URL+"/v1/processor/jobs/work?op=pause&reason=quietly", "",
		"Authorization", bearer(opsToken), foldtype.HeaderForwardedOp, "some-node")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the pause: %d %s", res.StatusCode, body)
	}
	if res.Header.Get(foldtype.HeaderOpRecorded) == "" {
		t.Fatalf("the answer to a marked verb does not say it was recorded: %v", res.Header)
	}
	recs, err := h.Audit(ctx, "/work", "jobs", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Op != "pause" || recs[0].Actor != "mallory" || recs[0].Reason != "quietly" || recs[0].Outcome != "done" {
		t.Fatalf("the audit after a pause sent with the forwarded mark: %+v", recs)
	}
	// Without the mark the answer carries no such header: only a node that passed a verb on reads it.
	res, body = request(t, "POST", ts.URL+"/v1/processor/jobs/work?op=resume", "", "Authorization", bearer(opsToken))
	if res.StatusCode != http.StatusOK || res.Header.Get(foldtype.HeaderOpRecorded) != "" {
		t.Fatalf("the resume: %d %v %s", res.StatusCode, res.Header, body)
	}
	if recs, err = h.Audit(ctx, "/work", "jobs", 0); err != nil || len(recs) != 2 {
		t.Fatalf("the audit after the resume: %+v %v", recs, err)
	}
}
