package history_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/history"
)

// The checker's positive controls: made-up histories with one known fault each must be rejected,
// and the same histories without the fault accepted, so a passing run of the nemesis tests means
// the checker looked.

func off(n int) string { return fmt.Sprintf("%016d_%016d", 0, n) }

// h builds a history from operations given as (client, call, return, input, output); a return
// of -1 means no answer.
type h struct{ ops []porcupine.Operation }

func (x *h) op(client int, call, ret int64, in history.Input, out history.Output) *h {
	if in.Stream == "" {
		in.Stream = "s"
	}
	if ret < 0 {
		ret = math.MaxInt64
	}
	x.ops = append(x.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return x
}

func appendOp(msg string) history.Input { return history.Input{Kind: history.Append, Msg: msg} }
func prodOp(msg string, seq int64) history.Input {
	return history.Input{Kind: history.Append, Msg: msg, Producer: "p", Seq: seq}
}
func readOp(from string) history.Input { return history.Input{Kind: history.Read, From: from} }
func acked(o string) history.Output    { return history.Output{Outcome: history.OK, Offset: o} }
func read(next string, utd bool, msgs ...string) history.Output {
	if msgs == nil {
		msgs = []string{}
	}
	return history.Output{Outcome: history.OK, Offset: next, UpToDate: utd, Msgs: msgs}
}

var unknown = history.Output{Outcome: history.Unknown}

func check(t *testing.T, x *h) history.Result {
	t.Helper()
	return history.Check(x.ops, 10*time.Second, "")
}

func wantVerdict(t *testing.T, name string, x *h, want porcupine.CheckResult) {
	t.Helper()
	r := check(t, x)
	if r.Verdict != want {
		t.Errorf("%s: verdict %v, want %v\n%s", name, r.Verdict, want, r.Explanation)
	}
}

func TestCheckerAcceptsAHistoryWithConcurrentAppendsUnknownsAndRetriedProducers(t *testing.T) {
	t.Parallel()
	x := (&h{}).
		op(0, 0, 10, appendOp("a1"), acked(off(1))).
		op(1, 1, 12, appendOp("a2"), acked(off(2))). // concurrent with a1, ordered after it
		op(2, 2, -1, appendOp("a3"), unknown).       // lost answer; it did take effect
		op(3, 3, -1, prodOp("p0", 0), unknown).      // lost answer; took effect
		op(3, 20, 25, prodOp("p0", 0), history.Output{Outcome: history.Duplicate}).
		op(3, 26, 30, prodOp("p1", 1), acked(off(5))).
		op(4, 31, 35, readOp("-1"), read(off(5), true, "a1", "a2", "a3", "p0", "p1")).
		op(4, 36, 40, readOp(off(2)), read(off(5), true, "a3", "p0", "p1")).
		op(2, 41, -1, appendOp("a4"), unknown). // lost answer; never took effect
		op(4, 42, 45, readOp(off(5)), read(off(5), true))
	wantVerdict(t, "valid history", x, porcupine.Ok)
	if c := history.CountOf(x.ops); c.Unknown != 3 || c.Acknowledged != 4 || c.Reads != 3 {
		t.Errorf("counts %v", c)
	}
}

func TestCheckerRejectsALostAcknowledgedAppend(t *testing.T) {
	t.Parallel()
	lost := (&h{}).
		op(0, 0, 10, appendOp("a1"), acked(off(1))).
		op(1, 5, 15, appendOp("a2"), acked(off(2))).
		op(2, 20, 30, readOp("-1"), read(off(2), true, "a2"))
	wantVerdict(t, "acknowledged a1 missing from a later read", lost, porcupine.Illegal)
	// The control: the read overlapping a1 may miss it only if a1 also came after a2... it did not
	// (a2's offset is greater), so the only legal read has both.
	kept := (&h{}).
		op(0, 0, 10, appendOp("a1"), acked(off(1))).
		op(1, 5, 15, appendOp("a2"), acked(off(2))).
		op(2, 20, 30, readOp("-1"), read(off(2), true, "a1", "a2"))
	wantVerdict(t, "both kept", kept, porcupine.Ok)
	empty := (&h{}).
		op(0, 0, 10, appendOp("a1"), acked(off(1))).
		op(2, 20, 30, readOp("-1"), read(history.ZeroOffset, true))
	wantVerdict(t, "read after the ack sees an empty stream", empty, porcupine.Illegal)
}

func TestCheckerRejectsAProducerSeqAppliedTwice(t *testing.T) {
	t.Parallel()
	twice := (&h{}).
		op(0, 0, -1, prodOp("p0", 0), unknown).
		op(0, 10, 20, prodOp("p0", 0), acked(off(2))).
		op(1, 30, 40, readOp("-1"), read(off(2), true, "p0", "p0"))
	wantVerdict(t, "a retried seq stored twice", twice, porcupine.Illegal)
	bothAccepted := (&h{}).
		op(0, 0, 5, prodOp("p0", 0), acked(off(1))).
		op(0, 10, 20, prodOp("p0", 0), acked(off(2)))
	wantVerdict(t, "a retried seq accepted twice", bothAccepted, porcupine.Illegal)
	dupWithoutOriginal := (&h{}).
		op(0, 0, 5, prodOp("p0", 0), history.Output{Outcome: history.Failed}).
		op(0, 10, 20, prodOp("p0", 0), history.Output{Outcome: history.Duplicate})
	wantVerdict(t, "a duplicate of a seq never accepted", dupWithoutOriginal, porcupine.Illegal)
	once := (&h{}).
		op(0, 0, -1, prodOp("p0", 0), unknown).
		op(0, 10, 20, prodOp("p0", 0), acked(off(2))).
		op(1, 30, 40, readOp("-1"), read(off(2), true, "p0"))
	wantVerdict(t, "a retried seq stored once", once, porcupine.Ok)
	// A retry of a seq an unanswered attempt applied, refused by a dead node's port, then
	// answered duplicate: nothing wrong. The same retry answered with a server's refusal is.
	notSent := (&h{}).
		op(0, 0, -1, prodOp("p0", 0), unknown).
		op(1, 5, 8, readOp("-1"), read(off(1), true, "p0")).
		op(0, 10, 20, prodOp("p0", 0), history.Output{Outcome: history.NotSent}).
		op(0, 30, 40, prodOp("p0", 0), history.Output{Outcome: history.Duplicate})
	wantVerdict(t, "a retry that never reached a server", notSent, porcupine.Ok)
	refused := (&h{}).
		op(0, 0, -1, prodOp("p0", 0), unknown).
		op(1, 5, 8, readOp("-1"), read(off(1), true, "p0")).
		op(0, 10, 20, prodOp("p0", 0), history.Output{Outcome: history.Failed})
	wantVerdict(t, "an applied seq refused by a server", refused, porcupine.Illegal)
}

func TestCheckerRejectsAReadThatGoesBackwardsOrSkips(t *testing.T) {
	t.Parallel()
	backwards := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(1, 20, 25, readOp("-1"), read(off(2), true, "a1", "a2")).
		op(1, 30, 35, readOp("-1"), read(off(1), true, "a1"))
	wantVerdict(t, "a later read sees less", backwards, porcupine.Illegal)
	skips := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(0, 11, 15, appendOp("a3"), acked(off(3))).
		op(1, 20, 25, readOp(off(1)), read(off(3), true, "a3"))
	wantVerdict(t, "a read from an offset skips a message", skips, porcupine.Illegal)
	resumeEarlier := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(1, 20, 25, readOp(off(2)), read(off(2), true, "a2"))
	wantVerdict(t, "a read from an offset repeats the message before it", resumeEarlier, porcupine.Illegal)
	phantom := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(1, 20, 25, readOp("-1"), read(off(2), true, "a1", "zz"))
	wantVerdict(t, "a read sees a message nobody appended", phantom, porcupine.Illegal)
	reordered := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(1, 20, 25, readOp("-1"), read(off(2), true, "a2", "a1")).
		op(0, 30, 35, appendOp("a3"), acked(off(3))).
		op(1, 40, 45, readOp("-1"), read(off(3), true, "a1", "a2", "a3"))
	wantVerdict(t, "a read shows the messages in another order", reordered, porcupine.Illegal)
	notUpToDate := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(1, 20, 25, readOp("-1"), read(off(1), true, "a1"))
	wantVerdict(t, "a read claims the tail short of it", notUpToDate, porcupine.Illegal)
	partial := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(0, 6, 10, appendOp("a2"), acked(off(2))).
		op(1, 20, 25, readOp("-1"), read(off(1), false, "a1")).
		op(1, 30, 35, readOp("-1"), read(off(2), true, "a1", "a2"))
	wantVerdict(t, "a partial chunk", partial, porcupine.Ok)
}

func TestCheckerRejectsOffsetsThatDoNotGrow(t *testing.T) {
	t.Parallel()
	x := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(2))).
		op(0, 6, 10, appendOp("a2"), acked(off(1)))
	wantVerdict(t, "a later append acknowledged at a smaller offset", x, porcupine.Illegal)
	same := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(1))).
		op(1, 0, 5, appendOp("a2"), acked(off(1)))
	wantVerdict(t, "two appends acknowledged at one offset", same, porcupine.Illegal)
	readNext := (&h{}).
		op(0, 0, 5, appendOp("a1"), acked(off(3))).
		op(1, 20, 25, readOp("-1"), read(off(2), true, "a1"))
	wantVerdict(t, "a read names another tail than the ack", readNext, porcupine.Illegal)
}

func TestCheckerExplainsARejectedHistory(t *testing.T) {
	t.Parallel()
	x := (&h{}).
		op(0, 0, 10, appendOp("a1"), acked(off(1))).
		op(2, 20, 30, readOp("-1"), read(history.ZeroOffset, true))
	r := check(t, x)
	if r.Verdict != porcupine.Illegal || r.Explanation == "" {
		t.Fatalf("verdict %v, explanation %q", r.Verdict, r.Explanation)
	}
	t.Log(r.Explanation)
}
