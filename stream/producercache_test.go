package stream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// The writer knows every producer of a stream it created in this incarnation
// (kernel.StreamState.ProducersAll), so a producer's first batch there needs no lookup. These check that the decision
// table answers exactly as with a lookup, and that the knowledge ends wherever it could be wrong.

// producerAppend sends one producer batch of a single message to path.
func producerAppend(s *Store, path, id string, epoch, seq int64) (AppendResult, error) {
	return s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: path, ContentType: "application/json",
		Body: []byte(fmt.Sprintf(`{"seq":%d}`, seq)), Producer: &ProducerHeaders{ID: id, Epoch: epoch, Seq: seq}})
}

// wantAccepted fails unless the batch was appended as new.
func wantAccepted(t *testing.T, s *Store, path, id string, epoch, seq int64) {
	t.Helper()
	res, err := producerAppend(s, path, id, epoch, seq)
	if err != nil || res.Duplicate {
		t.Fatalf("%s %s epoch %d seq %d: got %+v, %v; want accepted as new", path, id, epoch, seq, res, err)
	}
}

// wantDuplicate fails unless the batch was answered as a duplicate.
func wantDuplicate(t *testing.T, s *Store, path, id string, epoch, seq int64) {
	t.Helper()
	res, err := producerAppend(s, path, id, epoch, seq)
	if err != nil || !res.Duplicate {
		t.Fatalf("%s %s epoch %d seq %d: got %+v, %v; want a duplicate", path, id, epoch, seq, res, err)
	}
}

// wantRefused fails unless the batch was refused with code.
func wantRefused(t *testing.T, s *Store, path, id string, epoch, seq int64, code foldtype.Code) {
	t.Helper()
	res, err := producerAppend(s, path, id, epoch, seq)
	if foldtype.CodeOf(err) != code {
		t.Fatalf("%s %s epoch %d seq %d: got %+v, %v; want %s", path, id, epoch, seq, res, err, code)
	}
}

// knowsAllProducers reports, from inside the writer, whether its entry of the stream at path
// holds every producer of the stream.
func knowsAllProducers(t *testing.T, s *Store, path string) bool {
	t.Helper()
	var all bool
	if err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		m, err := tx.Stream(path)
		if err != nil {
			return err
		}
		all = m.ProducersAll()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return all
}

func mustCreateJSON(t *testing.T, s *Store, path string) {
	t.Helper()
	if _, err := s.Protocol().CreateStream(context.Background(), CreateRequest{Path: path, ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
}

func TestProducersOfAStreamTheWriterCreatedFollowTheDecisionTableWithoutLookups(t *testing.T) {
	s, _ := setup(t)
	mustCreateJSON(t, s, "/p")
	if !knowsAllProducers(t, s, "/p") {
		t.Fatal("the writer's entry of a stream it created does not know its (empty) producer set")
	}
	wantRefused(t, s, "/p", "a", 0, 1, foldtype.CodeSequenceGap) // a new producer starts at 0
	wantAccepted(t, s, "/p", "a", 0, 0)
	wantAccepted(t, s, "/p", "a", 0, 1)
	wantDuplicate(t, s, "/p", "a", 0, 1)
	wantDuplicate(t, s, "/p", "a", 0, 0)
	wantRefused(t, s, "/p", "a", 0, 3, foldtype.CodeSequenceGap)
	// Fencing: a new epoch starts at 0 and the old one is stale from then on.
	wantRefused(t, s, "/p", "a", 1, 1, foldtype.CodeBadRequest)
	wantAccepted(t, s, "/p", "a", 1, 0)
	wantRefused(t, s, "/p", "a", 0, 2, foldtype.CodeStaleEpoch)
	// A second producer on the same stream is new, whatever the first one did.
	wantRefused(t, s, "/p", "b", 1, 1, foldtype.CodeSequenceGap)
	wantAccepted(t, s, "/p", "b", 0, 0)
	wantDuplicate(t, s, "/p", "a", 1, 0)
	if !knowsAllProducers(t, s, "/p") {
		t.Fatal("the entry lost its producer set with two producers")
	}
	// What the database holds is what the writer answered from memory.
	if n := countRows(t, s, `SELECT count(*) FROM producers p JOIN streams s ON s.id = p.stream_id
		WHERE s.path = '/p' AND ((p.producer_id = 'a' AND p.epoch = 1 AND p.last_seq = 0) OR (p.producer_id = 'b' AND p.epoch = 0 AND p.last_seq = 0))`); n != 2 {
		t.Fatalf("%d producer rows as answered, want 2", n)
	}
}

func TestProducerSetKnownAtCreationEndsAtTheCachedProducersCap(t *testing.T) {
	s, _ := setup(t)
	mustCreateJSON(t, s, "/p")
	for i := range kernel.MaxCachedProducers + 2 {
		wantAccepted(t, s, "/p", fmt.Sprintf("p%d", i), 0, 0)
	}
	if knowsAllProducers(t, s, "/p") {
		t.Fatal("the entry claims to know every producer with more than it caches")
	}
	// The producers past the cap are looked up: each is known, with its seq.
	for i := range kernel.MaxCachedProducers + 2 {
		wantDuplicate(t, s, "/p", fmt.Sprintf("p%d", i), 0, 0)
		wantAccepted(t, s, "/p", fmt.Sprintf("p%d", i), 0, 1)
	}
	wantRefused(t, s, "/p", "new", 0, 1, foldtype.CodeSequenceGap)
}

// A write that stored a producer's state and then failed rolls back alone: neither the database
// nor the writer's entry keeps the producer, so its next batch is new.
func TestRolledBackProducerWriteLeavesNoProducerInTheKnownSet(t *testing.T) {
	s, _ := setup(t)
	mustCreateJSON(t, s, "/p")
	refused := errors.New("refused after the producer's state was stored")
	err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		m, err := tx.Stream("/p")
		if err != nil {
			return err
		}
		if err := tx.PutProducer(m, driver.Producer{ID: "a", LastSeq: 5}); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("the write: got %v, want its own refusal", err)
	}
	if !knowsAllProducers(t, s, "/p") {
		t.Fatal("a rolled-back write changed the committed entry")
	}
	wantRefused(t, s, "/p", "a", 0, 6, foldtype.CodeSequenceGap)
	wantAccepted(t, s, "/p", "a", 0, 0)
	if n := countRows(t, s, `SELECT count(*) FROM producers WHERE producer_id = 'a' AND last_seq = 0`); n != 1 {
		t.Fatalf("%d rows of producer a at seq 0, want 1", n)
	}
}

// A stream deleted and created again at the same path is a new stream: its producers start over,
// and no state of the old one's producers answers for them.
func TestRecreatedStreamStartsWithNoProducers(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	mustCreateJSON(t, s, "/p")
	wantAccepted(t, s, "/p", "a", 2, 0)
	wantAccepted(t, s, "/p", "a", 2, 1)
	if err := s.Protocol().DeleteStream(ctx, "/p"); err != nil {
		t.Fatal(err)
	}
	mustCreateJSON(t, s, "/p")
	if !knowsAllProducers(t, s, "/p") {
		t.Fatal("the recreated stream's entry does not know its producer set")
	}
	wantRefused(t, s, "/p", "a", 2, 2, foldtype.CodeSequenceGap)
	wantAccepted(t, s, "/p", "a", 0, 0) // epoch 0 is not stale on the new stream
	wantAccepted(t, s, "/p", "a", 0, 1)
	wantDuplicate(t, s, "/p", "a", 0, 1)
}

// After a restart, or once the writer evicted a stream, its entry is read from the row and does
// not claim to know the producers: they are looked up, and their seqs hold.
func TestProducersOfAStreamReadAgainAreLookedUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := openStore(path, Config{Logger: quietLog, ProducerReorderWait: -1, MaxCachedStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustCreateJSON(t, s, "/p")
	wantAccepted(t, s, "/p", "a", 1, 0)
	wantAccepted(t, s, "/p", "a", 1, 1)
	// Evicted: two other streams written take the cache of one.
	mustCreateJSON(t, s, "/q")
	mustCreateJSON(t, s, "/r")
	wantAccepted(t, s, "/q", "a", 0, 0)
	wantAccepted(t, s, "/r", "a", 0, 0)
	var cached bool
	if err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		cached = s.k.Cached("/p")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cached {
		t.Fatal("/p is still cached; the test needs it evicted")
	}
	if knowsAllProducers(t, s, "/p") {
		t.Fatal("an entry read again from its row claims to know every producer")
	}
	wantDuplicate(t, s, "/p", "a", 1, 1)
	wantRefused(t, s, "/p", "a", 0, 2, foldtype.CodeStaleEpoch)
	wantAccepted(t, s, "/p", "a", 1, 2)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s, err = openStore(path, Config{Logger: quietLog, ProducerReorderWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if knowsAllProducers(t, s, "/q") {
		t.Fatal("after a restart an entry claims to know every producer")
	}
	wantDuplicate(t, s, "/p", "a", 1, 2)
	wantAccepted(t, s, "/p", "a", 1, 3)
	wantDuplicate(t, s, "/q", "a", 0, 0)
	wantRefused(t, s, "/q", "b", 0, 1, foldtype.CodeSequenceGap)
	wantAccepted(t, s, "/q", "b", 0, 0)
}
