package foldstream_test

import (
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

type noteState struct {
	Count int    `json:"count"`
	Note  string `json:"note"`
}

// newNoter is a processor whose "tick" increments count and declares it, "sneak" changes note but
// declares count (a wrong declaration), and "plain" changes note and declares nothing.
func newNoter(t *testing.T) *fn[noteState] {
	c := must[*foldstream.Contract[noteState]](t)(foldstream.DefineContract(foldstream.ContractConfig[noteState]{
		Slug: "noter", Version: "1", Consumes: []string{"tick", "sneak", "plain"}}))
	return &fn[noteState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[noteState]) (noteState, bool, error) {
			s := a.State
			switch a.Event.Type {
			case "tick":
				s.Count++
				a.DeclareLiveChange("/count")
			case "sneak":
				s.Note += "s"
				a.DeclareLiveChange("/count")
			case "plain":
				s.Note += "p"
			}
			return s, true, nil
		}}
}

func setupNoter(t *testing.T) (*testsupport.MemoryStream, *foldstream.Engine[noteState], *errLog) {
	mem, rep := testsupport.NewMemoryStream(), &errLog{}
	eng := newEngine[noteState](t, newNoter(t), mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) {
		c.Clock, c.Reporter = testsupport.NewFakeClock(), rep // the clock never moves: one check per engine
	})
	mem.Register(eng)
	return mem, eng, rep
}

func liveIs(t *testing.T, eng *foldstream.Engine[noteState], want string) {
	t.Helper()
	snap, err := eng.LiveSnapshot(ctxFor(t))
	mustDo(t, err)
	jsonEq(t, "live state", snap.State, want)
}

// A reduce's declaration reaches the live state: the engine publishes through SetChanged, whose
// check catches (and corrects) a member that changed without being declared.
func TestEngineReduceDeclaringItsChangesPublishesOnlyTheDeclaredMembers(t *testing.T) {
	t.Parallel()
	mem, eng, rep := setupNoter(t)
	appendT(t, mem, ev("sneak")) // the first publish is the (frozen) interval's one check
	settle(t, mem)
	liveIs(t, eng, `{"count":0,"note":"s"}`)
	sites, _ := rep.get()
	eq(t, "sites", sites, []string{foldstream.SiteLiveStateUndeclared})
	foldstream.ReduceArgs[noteState]{}.DeclareLiveChange("/count") // bare: does nothing
}

// A reduce that changes the state and declares nothing makes the publish compare the whole view,
// in the same batch as a declared change or on its own.
func TestEngineReduceThatDeclaresNothingMakesThePublishCompareTheWholeView(t *testing.T) {
	t.Parallel()
	mem, eng, rep := setupNoter(t)
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	appendT(t, mem, ev("tick"), ev("plain"))
	settle(t, mem)
	liveIs(t, eng, `{"count":2,"note":"p"}`)
	appendT(t, mem, ev("plain"))
	settle(t, mem)
	liveIs(t, eng, `{"count":2,"note":"pp"}`)
	if sites, _ := rep.get(); len(sites) != 0 {
		t.Fatalf("reported %v; nothing was declared wrongly", sites)
	}
}

// When something else set the engine's live state, the engine's next publish is relative to a view
// its declarations do not describe: it compares the whole view instead.
func TestEngineDeclaredChangesAfterAForeignSetPublishTheWholeView(t *testing.T) {
	t.Parallel()
	mem, eng, rep := setupNoter(t)
	appendT(t, mem, ev("tick")) // the one check of the (frozen) interval
	settle(t, mem)
	appendT(t, mem, ev("tick")) // declared, not checked
	settle(t, mem)
	liveIs(t, eng, `{"count":2,"note":""}`)
	eng.LiveState().Set(noteState{Count: 99, Note: "foreign"})
	appendT(t, mem, ev("tick"))
	settle(t, mem)
	liveIs(t, eng, `{"count":3,"note":""}`)
	if sites, _ := rep.get(); len(sites) != 0 {
		t.Fatalf("reported %v", sites)
	}
}
