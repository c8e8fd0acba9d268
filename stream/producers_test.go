package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// Pipelined producer requests may reach the writer out of order. A request whose seq is ahead of
// the next expected one waits (up to Config.ProducerReorderWait) for the earlier seq to commit,
// then lands, instead of being refused with a sequence gap the client must resolve by resending.
func TestProducerSeqArrivingEarlyWaitsForItsPredecessor(t *testing.T) {
	t.Parallel()
	// The wait runs on a fake clock that the test never moves: seq 1 waits until seq 0 lands.
	clk := testsupport.NewFakeClock()
	s, err := openStore(":memory:", Config{Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	appendSeq := func(seq int64) (AppendResult, error) {
		return s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
			Body: []byte(`{"n":1}`), Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: seq}})
	}
	deadline := clk.Now().Add(DefaultProducerReorderWait)
	early := make(chan error, 1)
	go func() {
		res, err := appendSeq(1)
		if err == nil && (res.Duplicate || res.Seq != 1) {
			err = errors.New("seq 1 was not accepted as new")
		}
		early <- err
	}()
	// Let seq 1 reach the writer first: it was refused with a gap and waits on the clock.
	clk.WaitArmed(t, deadline)
	if _, err := appendSeq(0); err != nil {
		t.Fatalf("seq 0: %v", err)
	}
	if err := <-early; err != nil {
		t.Fatalf("seq 1 after its predecessor landed: got %v, want accepted", err)
	}
	info, err := s.Protocol().HeadStream(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	if info.Tail != 2 {
		t.Fatalf("tail: got %d, want 2", info.Tail)
	}
}

// A gap that no earlier request fills is still refused, after the bounded wait on the store's
// clock.
func TestProducerSeqGapStillRefusedAfterTheWait(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	s, err := openStore(":memory:", Config{Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
			Body: []byte(`{"n":1}`), Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 3}})
		done <- err
	}()
	deadline := clk.Now().Add(DefaultProducerReorderWait)
	clk.WaitArmed(t, deadline)
	select {
	case err := <-done:
		t.Fatalf("answered before the wait ran out: %v", err)
	default:
	}
	clk.Advance(DefaultProducerReorderWait)
	err = <-done
	if exp, got, _ := SequenceGapOf(err); !errors.Is(err, foldtype.ErrSequenceGap) || exp != 0 || got != 3 {
		t.Fatalf("got %v, want a sequence gap expected 0 received 3", err)
	}
}

// A producer request whose predecessor is still arriving (its headers were read, its append is to
// come) waits past Config.ProducerReorderWait, however slow the predecessor, and commits after it:
// no gap is answered. Once the predecessor is gone without committing, the gap is answered at the
// next expiry.
func TestProducerSeqGapWaitsWhileTheMissingSeqIsArriving(t *testing.T) {
	t.Parallel()
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "arrives", true: "lost"}[lost], func(t *testing.T) {
			t.Parallel()
			clk := testsupport.NewFakeClock()
			s, err := openStore(":memory:", Config{Clock: clk, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			ctx := context.Background()
			if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "/p", ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}
			arriving := s.Protocol().ProducerArriving("/p", "p", 0, 0)
			done := make(chan error, 1)
			go func() {
				_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
					Body: []byte(`{"n":1}`), Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 1}})
				done <- err
			}()
			start := clk.Now()
			for i := 1; i <= 3; i++ { // three waits run out while seq 0 is arriving: each is renewed
				clk.WaitArmed(t, start.Add(time.Duration(i)*DefaultProducerReorderWait))
				clk.Advance(DefaultProducerReorderWait)
			}
			clk.WaitArmed(t, start.Add(4*DefaultProducerReorderWait))
			select {
			case err := <-done:
				t.Fatalf("answered while seq 0 was arriving: %v", err)
			default:
			}
			if lost {
				arriving()
				clk.Advance(DefaultProducerReorderWait)
				if err := <-done; !errors.Is(err, foldtype.ErrSequenceGap) {
					t.Fatalf("after the missing seq went away: got %v, want a sequence gap", err)
				}
				return
			}
			if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/p", ContentType: "application/json",
				Body: []byte(`{"n":0}`), Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}}); err != nil {
				t.Fatal(err)
			}
			arriving()
			if err := <-done; err != nil {
				t.Fatalf("seq 1 after seq 0 arrived: %v", err)
			}
			if got := readAll(t, s, "/p"); got != `[{"n":0},{"n":1}]` {
				t.Fatalf("stream: %s", got)
			}
		})
	}
}
