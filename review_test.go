package foldstream_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// Spec §11.3 / §18.1: the ceiling counts the characters of the state's JSON text as upstream's
// JSON.stringify writes it (UTF-16 code units). encoding/json's default HTML escaping writes "<" as
// the six characters \u003c, which JSON.stringify never does; a state of 500 000 "<" is ~500 000
// characters upstream and must not be refused (nor latched) as a 3-million-character state.
func TestS11_3_CeilingCountsJSONTextLikeUpstream(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[bigState]](t)(foldstream.DefineContract(foldstream.ContractConfig[bigState]{Slug: "markup", Version: "1"}))
	p := &fn[bigState]{Base: foldstream.NewBase(c), project: projectNull[bigState],
		reduce: func(a foldstream.ReduceArgs[bigState]) (bigState, bool, error) {
			return bigState{S: strings.Repeat("<", 500000)}, true, nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[bigState](t, p, mem, cps)
	appendT(t, mem, ev("e"))
	mustDo(t, eng.CatchUpFromLog(ctxFor(t)))
	eq(t, "writes", cps.Writes(), 1)
	cp, ok := cps.Get("markup")
	if !ok {
		t.Fatal("no row")
	}
	if n := foldstream.UTF16Len(string(cp.State)); n != 500000+len(`{"s":""}`) {
		t.Errorf("stored state is %d chars, want the JSON.stringify length %d", n, 500000+len(`{"s":""}`))
	}
}

// Spec §12.1 step 4: the patch ceiling counts the patch's JSON text like JSON.stringify. A patch
// carrying 300 000 "<" is ~300 000 characters, far under 1048576: it must travel, not be nulled.
func TestS12_1_PatchCeilingCountsJSONTextLikeUpstream(t *testing.T) {
	t.Parallel()
	sink := &recSink{}
	l, _ := newLive(sink, map[string]string{"s": ""})
	l.Set(map[string]string{"s": strings.Repeat("<", 300000)})
	waitLive(t, l)
	fs := sink.frames()
	if len(fs) != 1 || fs[0].Patch == nil {
		t.Fatalf("got %d frames (patch nil=%v); want one frame with a patch", len(fs), len(fs) == 1 && fs[0].Patch == nil)
	}
}

// Spec §6 step 2: only an absent payload is validated as {}; a present falsy non-object payload
// (0, false, "") is validated as itself and so fails an object schema. The absent payload's
// normalized form is {} (it is what reduce and processEvent see).
func TestS6_AbsentPayloadIsEmptyObjectFalsyPayloadsFail(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[nState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nState]{
		Slug: "loose", Version: "1",
		Events: []foldstream.EventDefinition{foldstream.DefineEventSchema("demo/any", "", json.RawMessage(`{"type":"object"}`))}}))
	for _, raw := range []string{`0`, `false`, `""`} {
		if _, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: json.RawMessage(raw)}); err == nil {
			t.Errorf("payload %s accepted", raw)
		}
	}
	for _, raw := range []json.RawMessage{nil, json.RawMessage(`null`)} {
		norm, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: raw})
		if err != nil {
			t.Fatalf("absent payload %q refused: %v", raw, err)
		}
		jsonEq(t, "normalized absent payload", norm.Payload, `{}`)
	}
}

var _ = context.Background
