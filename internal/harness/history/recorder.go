package history

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects operations from concurrent clients with their call and return times on one
// monotonic clock.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Call is an operation under way.
type Call struct {
	r      *Recorder
	client int
	in     Input
	at     int64
}

// Begin notes that client calls in now.
func (r *Recorder) Begin(client int, in Input) *Call {
	return &Call{r: r, client: client, in: in, at: int64(time.Since(r.start))}
}

// End records the call answered out now. An Unknown outcome is recorded with no return (a
// far-future return time): it may take effect any time after its call, or never. An unanswered
// read is dropped, as it constrains nothing.
func (c *Call) End(out Output) {
	ret := int64(time.Since(c.r.start))
	if out.Outcome == Unknown {
		if c.in.Kind == Read {
			return
		}
		ret = math.MaxInt64
	}
	c.r.Add(porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.at, Output: out, Return: ret})
}

// Add records a finished operation as given (for made-up histories).
func (r *Recorder) Add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Operations returns a copy of what has been recorded.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Counts summarises a history.
type Counts struct {
	Ops, Appends, Acknowledged, Unknown, Failed, Reads int
	// TookEffect counts the appends with lost answers that the final reads show (set by Check).
	TookEffect int
}

func (c Counts) String() string {
	return fmt.Sprintf("%d ops: %d appends (%d acknowledged, %d unknown of which %d took effect, %d refused), %d reads",
		c.Ops, c.Appends, c.Acknowledged, c.Unknown, c.TookEffect, c.Failed, c.Reads)
}

// CountOf counts the operations of a history by kind and outcome.
func CountOf(ops []porcupine.Operation) Counts {
	var c Counts
	for _, op := range ops {
		c.Ops++
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == Read {
			c.Reads++
			continue
		}
		c.Appends++
		switch out.Outcome {
		case OK, Duplicate:
			c.Acknowledged++
		case Unknown:
			c.Unknown++
		default:
			c.Failed++
		}
	}
	return c
}

// Result is the checker's verdict on a history.
type Result struct {
	// Verdict is porcupine.Ok, porcupine.Illegal, or porcupine.Unknown when the check ran out of
	// time.
	Verdict porcupine.CheckResult
	Counts  Counts
	// Explanation, for an Illegal history, lists the operations of the first stream that could
	// not be linearized, with the longest linearizable prefix found.
	Explanation string
	// Visualization is the path of Porcupine's HTML rendering of an Illegal history ("" if none).
	Visualization string
}

// Check decides whether ops is linearizable, giving up after timeout (Verdict Unknown). The
// history must end with a read of each stream from the start, after every other operation
// returned (Workload.FinalReads): the model places appends where that read shows them, so an
// acknowledged append it does not show is lost. When vizDir
// is not "", an Illegal history is also rendered there as HTML (Result.Visualization).
func Check(ops []porcupine.Operation, timeout time.Duration, vizDir string) Result {
	counts := CountOf(ops)
	m, ops := Model(ops)
	for _, op := range ops {
		if op.Input.(Input).Kind == Append && op.Output.(Output).Outcome == Unknown {
			counts.TookEffect++
		}
	}
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	r := Result{Verdict: res, Counts: counts}
	if res != porcupine.Illegal {
		return r
	}
	r.Explanation = explain(m, ops, info)
	if vizDir == "" {
		return r
	}
	if f, err := os.CreateTemp(vizDir, "history-*.html"); err == nil {
		if porcupine.Visualize(m, info, f) == nil {
			r.Visualization = f.Name()
		}
		f.Close()
	}
	return r
}

// explain describes the partitions (streams) that could not be linearized: the longest
// linearization found and the operations it could not place.
func explain(m porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	parts := m.Partition(ops)
	lins := info.PartialLinearizationsOperations()
	for i, part := range parts {
		if i >= len(lins) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range lins[i] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(part) {
			continue // this stream's history is linearizable
		}
		fmt.Fprintf(&b, "stream %s: %d of %d operations linearized; longest linearization:\n",
			part[0].Input.(Input).Stream, len(longest), len(part))
		placed := map[[2]int64]bool{}
		for _, op := range longest {
			placed[[2]int64{int64(op.ClientId), op.Call}] = true
			fmt.Fprintf(&b, "  [c%d %s..%s] %s\n", op.ClientId, ms(op.Call), ms(op.Return), m.DescribeOperation(op.Input, op.Output))
		}
		b.WriteString(" not placed:\n")
		for _, op := range part {
			if !placed[[2]int64{int64(op.ClientId), op.Call}] {
				fmt.Fprintf(&b, "  [c%d %s..%s] %s\n", op.ClientId, ms(op.Call), ms(op.Return), m.DescribeOperation(op.Input, op.Output))
			}
		}
	}
	return b.String()
}

func ms(t int64) string {
	if t == math.MaxInt64 {
		return "∞"
	}
	return fmt.Sprintf("%.1fms", float64(t)/1e6)
}
