// Package history records what clients of a Durable Streams server asked and were answered, and
// checks with Porcupine that the whole history is linearizable against a model of a stream as a
// log: no acknowledged append lost or duplicated, offsets strictly increasing, no read that goes
// backwards, skips or sees a message nobody appended, and every idempotent-producer seq applied at
// most once.
//
// An operation whose answer was lost (a timeout, a cut connection, a 5xx) is recorded with no
// return. The model lets it take effect where Porcupine places it; as it never returned it may be
// placed after every other operation, which is how one that never took effect is explained.
package history

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// ZeroOffset is the tail of an empty stream (protocol §4).
const ZeroOffset = "0000000000000000_0000000000000000"

// Kind is what an operation does.
type Kind uint8

const (
	// Append posts one JSON message; with Producer set it is an idempotent-producer append.
	Append Kind = iota
	// Read reads from an offset (catch-up or long-poll).
	Read
)

// Input is one operation as the client asked it.
type Input struct {
	Stream string
	Kind   Kind
	// Msg is the appended message (Append). Plain appends carry a message no other operation
	// carries; a producer's retries of one seq carry the same one.
	Msg string
	// Producer, Epoch and Seq are the idempotent-producer headers (Append; Producer "" = none).
	Producer string
	Epoch    int64
	Seq      int64
	// From is the offset a Read starts at: "-1" or an offset the client was given.
	From string
	// Live is "long-poll" for a long-poll read ("" catch-up), and Via the index of the server
	// the request went to: neither changes what is checked, both help read a rejected history.
	Live string
	Via  int
}

// Outcome is what the client learned.
type Outcome uint8

const (
	// Unknown: no answer (timeout, connection cut, 5xx): the operation may or may not have
	// taken effect. Recorded with no return.
	Unknown Outcome = iota
	// OK: an append accepted (204, or 200 under producer headers) or a read answered.
	OK
	// Failed: a definite refusal by the server that changed nothing (a 4xx the model has no
	// rule for).
	Failed
	// Duplicate: a producer append answered 204 as a duplicate of an accepted seq.
	Duplicate
	// Fenced: a producer append refused 403 for a stale epoch.
	Fenced
	// Gap: a producer append refused 409 for a sequence gap.
	Gap
	// NotSent: the request never reached a server (its connection was refused): it changed
	// nothing and says nothing of the state. Unlike Failed it is no server's answer, so a retry
	// of a seq another attempt applied may meet it while its node is down.
	NotSent
)

var outcomeNames = [...]string{"unknown", "ok", "failed", "duplicate", "fenced", "gap", "not sent"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Output is the answer.
type Output struct {
	Outcome Outcome
	// Offset is Stream-Next-Offset: the tail after an accepted append, where to read next after
	// a read.
	Offset string
	// Msgs are the messages a read returned, in order.
	Msgs []string
	// UpToDate is Stream-Up-To-Date on a read: the answer reached the tail.
	UpToDate bool
	// ExpectedSeq is Producer-Expected-Seq on a Gap.
	ExpectedSeq int64
}

// logState is the model's state of one stream: its messages in order, the offset after each
// prefix where known, and the producers' last accepted (epoch, seq). It is never changed once
// made; key identifies it for Porcupine's cache.
type logState struct {
	msgs []string
	// tails[i] is the offset after msgs[:i] ("" while no answer has named it); tails[0] is
	// ZeroOffset. len(tails) == len(msgs)+1.
	tails []string
	prods map[string]producer
	key   string
}

type producer struct{ epoch, seq int64 }

func newLogState(msgs, tails []string, prods map[string]producer) *logState {
	s := &logState{msgs: msgs, tails: tails, prods: prods}
	var b strings.Builder
	for i, m := range msgs {
		b.WriteString(m)
		b.WriteByte('@')
		b.WriteString(tails[i+1])
		b.WriteByte(',')
	}
	b.WriteByte('|')
	ids := make([]string, 0, len(prods))
	for id := range prods {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "%s:%d:%d,", id, prods[id].epoch, prods[id].seq)
	}
	s.key = b.String()
	return s
}

// lastKnownTail returns the greatest offset the state knows (offsets grow with the index).
func (s *logState) lastKnownTail() string {
	for i := len(s.tails) - 1; i >= 0; i-- {
		if s.tails[i] != "" {
			return s.tails[i]
		}
	}
	return ""
}

// appended returns s with msg appended at offset tail ("" unknown) and the producer's state.
func (s *logState) appended(msg, tail, prodID string, p producer) *logState {
	msgs := append(slices.Clip(s.msgs), msg)
	tails := append(slices.Clip(s.tails), tail)
	prods := s.prods
	if prodID != "" {
		prods = make(map[string]producer, len(s.prods)+1)
		for k, v := range s.prods {
			prods[k] = v
		}
		prods[prodID] = p
	}
	return newLogState(msgs, tails, prods)
}

// decision is what the server must answer a producer append in a state (protocol §20.2).
type decision struct {
	outcome  Outcome // OK (accept), Duplicate, Fenced, Gap or Failed (400: new epoch not at 0)
	expected int64   // Gap
}

func (s *logState) decide(in Input) decision {
	p, ok := s.prods[in.Producer]
	switch {
	case !ok && in.Seq == 0:
		return decision{outcome: OK}
	case !ok:
		return decision{outcome: Gap, expected: 0}
	case in.Epoch < p.epoch:
		return decision{outcome: Fenced}
	case in.Epoch > p.epoch && in.Seq != 0:
		return decision{outcome: Failed}
	case in.Epoch > p.epoch:
		return decision{outcome: OK}
	case in.Seq <= p.seq:
		return decision{outcome: Duplicate}
	case in.Seq == p.seq+1:
		return decision{outcome: OK}
	default:
		return decision{outcome: Gap, expected: p.seq + 1}
	}
}

// positions gives where each message of a stream stands in the longest read of it from the
// start (the run's final read): an append can take effect only when the log is that long. It
// makes the search's choices deterministic without loosening any check: every read is still
// compared with the log, and an acknowledged append no read shows has no place at all.
type positions map[string]map[string]int

// positionsOf finds, per stream, the longest answered read from the start.
func positionsOf(ops []porcupine.Operation) positions {
	longest := map[string][]string{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == Read && in.From == "-1" && out.Outcome == OK && len(out.Msgs) >= len(longest[in.Stream]) {
			longest[in.Stream] = out.Msgs
		}
	}
	p := positions{}
	for st, msgs := range longest {
		p[st] = map[string]int{}
		for i, m := range msgs {
			if _, seen := p[st][m]; !seen {
				p[st][m] = i
			}
		}
	}
	return p
}

// prune drops the appends with lost answers that cannot matter, which Porcupine would otherwise
// try at every point of the search (each such subset a new cache key): an append no read shows,
// every attempt of a producer's seq but the first with a lost answer, and all of them when one
// was accepted. None hides a fault: an append no read shows took effect after the final read or
// never, where nothing observes it; the first attempt of a seq can take effect wherever a later
// one could, as it was called before them and never returned; and beside an accepted attempt the
// others can only be duplicates, which change nothing.
func prune(ops []porcupine.Operation, pos positions) []porcupine.Operation {
	type seqKey struct {
		stream, producer string
		epoch, seq       int64
	}
	first := map[seqKey]int{}
	accepted := map[seqKey]bool{}
	for i, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != Append || in.Producer == "" {
			continue
		}
		k := seqKey{in.Stream, in.Producer, in.Epoch, in.Seq}
		if out.Outcome == OK {
			accepted[k] = true
		}
		if out.Outcome != Unknown {
			continue
		}
		if j, ok := first[k]; !ok || op.Call < ops[j].Call {
			first[k] = i
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Kind == Append && o.Outcome == Unknown {
			if _, shown := pos[in.Stream][in.Msg]; !shown {
				continue
			}
			k := seqKey{in.Stream, in.Producer, in.Epoch, in.Seq}
			if in.Producer != "" && (accepted[k] || first[k] != i) {
				continue
			}
		}
		out = append(out, op)
	}
	return out
}

// step returns the states s may move to when in is answered out (none: the answer is impossible).
func step(pos positions, s *logState, in Input, out Output) []*logState {
	if out.Outcome == NotSent {
		return []*logState{s}
	}
	switch in.Kind {
	case Append:
		at, known := pos[in.Stream][in.Msg]
		return stepAppend(s, in, out, known, known && at == len(s.msgs))
	case Read:
		if n := stepRead(s, in, out); n != nil {
			return []*logState{n}
		}
	}
	return nil
}

// stepAppend steps an append whose message some read shows (known), here at the log's end (here)
// or elsewhere.
func stepAppend(s *logState, in Input, out Output, known, here bool) []*logState {
	accept := func(tail string) *logState {
		return s.appended(in.Msg, tail, in.Producer, producer{epoch: in.Epoch, seq: in.Seq})
	}
	okTail := func() bool {
		last := s.lastKnownTail()
		return out.Offset != "" && out.Offset > last
	}
	if in.Producer == "" {
		switch out.Outcome {
		case Unknown:
			// An append with no answer took effect where the reads show it, or never.
			switch {
			case !known:
				return []*logState{s}
			case here:
				return []*logState{accept("")}
			}
			return nil
		case OK:
			if !here || !okTail() {
				return nil
			}
			return []*logState{accept(out.Offset)}
		default:
			return []*logState{s}
		}
	}
	d := s.decide(in)
	switch out.Outcome {
	case Unknown:
		// As for plain appends; an attempt of a seq that another attempt applied is linearized
		// after it, where it is a duplicate.
		switch {
		case d.outcome != OK || !known:
			return []*logState{s}
		case here:
			return []*logState{accept("")}
		}
		return nil
	case OK:
		if d.outcome != OK || !here || !okTail() {
			return nil
		}
		return []*logState{accept(out.Offset)}
	case Failed:
		// A refusal the model has no rule for changes nothing, but an accepted append is never
		// refused: an append the state must take cannot fail definitely.
		if d.outcome == OK || d.outcome == Failed {
			return []*logState{s}
		}
		return nil
	case Gap:
		if d.outcome == Gap && d.expected == out.ExpectedSeq {
			return []*logState{s}
		}
		return nil
	default: // Duplicate, Fenced
		if d.outcome == out.Outcome {
			return []*logState{s}
		}
		return nil
	}
}

// stepRead checks a read against s and returns s with the offsets the read named learned, or nil.
func stepRead(s *logState, in Input, out Output) *logState {
	if out.Outcome != OK {
		return s // a read that was not answered says nothing
	}
	i := -1
	if in.From == "-1" {
		i = 0
	} else {
		i = slices.Index(s.tails, in.From)
	}
	if i < 0 {
		return nil // the read starts at an offset this stream's history never named
	}
	k := i + len(out.Msgs)
	if k > len(s.msgs) || !slices.Equal(out.Msgs, s.msgs[i:k]) {
		return nil
	}
	if out.UpToDate && k != len(s.msgs) {
		return nil
	}
	if s.tails[k] != "" {
		if out.Offset != s.tails[k] {
			return nil
		}
		return s
	}
	// Learn the offset after msgs[:k]: it lies strictly between its known neighbours.
	for j := k - 1; j >= 0; j-- {
		if s.tails[j] != "" {
			if out.Offset <= s.tails[j] {
				return nil
			}
			break
		}
	}
	for j := k + 1; j < len(s.tails); j++ {
		if s.tails[j] != "" {
			if out.Offset >= s.tails[j] {
				return nil
			}
			break
		}
	}
	tails := slices.Clone(s.tails)
	tails[k] = out.Offset
	return newLogState(s.msgs, tails, s.prods)
}

// Model is the Porcupine model of Durable Streams streams as logs, one partition per stream, for
// the history ops (whose reads place its messages), and the operations of ops worth checking.
func Model(ops []porcupine.Operation) (porcupine.Model, []porcupine.Operation) {
	pos := positionsOf(ops)
	ops = prune(ops, pos)
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range h {
				st := op.Input.(Input).Stream
				if _, ok := by[st]; !ok {
					names = append(names, st)
				}
				by[st] = append(by[st], op)
			}
			out := make([][]porcupine.Operation, 0, len(names))
			for _, n := range names {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() []interface{} {
			return []interface{}{newLogState(nil, []string{ZeroOffset}, nil)}
		},
		Step: func(state, input, output interface{}) []interface{} {
			next := step(pos, state.(*logState), input.(Input), output.(Output))
			out := make([]interface{}, len(next))
			for i, n := range next {
				out[i] = n
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(*logState).key == b.(*logState).key },
		DescribeOperation: func(input, output interface{}) string {
			return Describe(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string {
			s := state.(*logState)
			return fmt.Sprintf("%d msgs %v, tails %v, producers %v", len(s.msgs), s.msgs, s.tails, s.prods)
		},
	}
	return nm.ToModel(), ops
}

// Describe renders one operation for a person reading a history.
func Describe(in Input, out Output) string {
	switch in.Kind {
	case Append:
		prod := ""
		if in.Producer != "" {
			prod = fmt.Sprintf(" [%s e%d s%d]", in.Producer, in.Epoch, in.Seq)
		}
		res := out.Outcome.String()
		if out.Outcome == OK {
			res = out.Offset
		}
		if out.Outcome == Gap {
			res = fmt.Sprintf("gap, expected %d", out.ExpectedSeq)
		}
		return fmt.Sprintf("%s: append(%s)%s via %d -> %s", in.Stream, in.Msg, prod, in.Via, res)
	default:
		how := fmt.Sprintf(" via %d", in.Via)
		if in.Live != "" {
			how = " " + in.Live + how
		}
		if out.Outcome != OK {
			return fmt.Sprintf("%s: read(%s)%s -> %s", in.Stream, in.From, how, out.Outcome)
		}
		utd := ""
		if out.UpToDate {
			utd = " up-to-date"
		}
		return fmt.Sprintf("%s: read(%s)%s -> %v next %s%s", in.Stream, in.From, how, out.Msgs, out.Offset, utd)
	}
}
