package stream

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// hugeJSON returns a JSON array of n messages of about 200 bytes, and the messages joined as a
// catch-up read returns them.
func hugeJSON(n int) (body []byte, joined string) {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 180))
	}
	return []byte("[" + b.String() + "]"), b.String()
}

// readWhole reads the stream from the start to the tail, following Next.
func readWhole(t *testing.T, s *Store, path string) (body []byte, count int, tail int64) {
	t.Helper()
	after := int64(0)
	for {
		res, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: path, After: after})
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if IsJSONContentType(res.Info.ContentType) && len(res.Body) >= 2 {
			if len(body) > 0 && res.Count > 0 {
				body = append(body, ',')
			}
			body = append(body, res.Body[1:len(res.Body)-1]...)
		} else {
			body = append(body, res.Body...)
		}
		count += res.Count
		after = res.Next
		if res.UpToDate {
			return body, count, res.Info.Tail
		}
	}
}

func hiddenMarks(t *testing.T, s *Store) int {
	t.Helper()
	return countRows(t, s, `SELECT count(*) FROM streams WHERE hidden_from IS NOT NULL`)
}

// A huge append takes many commits (one per slice) and reads back whole, with the tail at its end
// and no visibility mark left behind.
func TestHugeAppendCommitsInSlicesAndReadsBackWhole(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/bytes", "application/octet-stream")
	createStream(t, s, "/json", "application/json")

	big := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16) // 3 MiB: 12 slices
	before := s.k.Commits()
	res, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/bytes", ContentType: "application/octet-stream", Body: big})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.k.Commits() - before; n < 12 {
		t.Fatalf("a 3 MiB byte append took %d commits, want one per 256 KiB slice (12)", n)
	}
	if res.Tail != int64(len(big)) {
		t.Fatalf("tail %d, want %d", res.Tail, len(big))
	}
	if got, _, tail := readWhole(t, s, "/bytes"); !bytes.Equal(got, big) || tail != int64(len(big)) {
		t.Fatalf("byte stream read back %d bytes (tail %d), want the %d appended", len(got), tail, len(big))
	}

	body, joined := hugeJSON(12_000) // ~2.4 MB
	before = s.k.Commits()
	res, err = s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/json", ContentType: "application/json", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.k.Commits() - before; n < 8 {
		t.Fatalf("a 2.4 MB JSON append took %d commits, want one per slice", n)
	}
	if res.Tail != 12_000 {
		t.Fatalf("tail %d, want 12000", res.Tail)
	}
	if got, count, _ := readWhole(t, s, "/json"); string(got) != joined || count != 12_000 {
		t.Fatalf("json stream read back %d messages, want 12000 in order", count)
	}
	// A small append after it continues the offsets.
	if res, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/json", ContentType: "application/json", Body: []byte(`{"after":1}`)}); err != nil || res.Tail != 12_001 {
		t.Fatalf("append after the huge record: tail %d, %v; want 12001", res.Tail, err)
	}
	if n := hiddenMarks(t, s); n != 0 {
		t.Fatalf("%d streams still carry a visibility mark", n)
	}
}

func createStream(t *testing.T, s *Store, path, ct string) {
	t.Helper()
	if _, err := s.Protocol().CreateStream(context.Background(), CreateRequest{Path: path, ContentType: ct}); err != nil {
		t.Fatal(err)
	}
}

// pausedHugeAppend starts a huge append to path that stops after its third hidden slice committed.
// It returns a channel closed once it stopped there, the function that lets it go on, and a
// channel with its outcome.
func pausedHugeAppend(t *testing.T, s *Store, ctx context.Context, req AppendRequest) (reached <-chan struct{}, proceed func(), done <-chan error) {
	t.Helper()
	var msgs []rawjson.Message
	var msgErr error
	if IsJSONContentType(req.ContentType) {
		msgs, msgErr = splitJSON(req.Body, false, req.Provenance)
	}
	r := s.planSliced(req, msgs, msgErr)
	if r == nil {
		t.Fatal("the append does not take the sliced path")
	}
	at, goOn, out := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	r.AfterSlice = func(written int) {
		if written == 3 {
			close(at)
			<-goOn
		}
	}
	go func() {
		_, ok, err := s.appendSliced(ctx, req, msgs, msgErr, r)
		if !ok && err == nil {
			err = errors.New("the append fell back to one transaction")
		}
		out <- err
	}()
	return at, func() { close(goOn) }, out
}

// parkedWrites counts the writes waiting for a reservation, read on the writer goroutine.
func parkedWrites(s *Store) int {
	n := 0
	_ = s.k.Write(context.Background(), func(*kernel.Tx) error { n = s.k.ParkedWrites(); return nil })
	return n
}

// While a huge record is being written, readers see none of it (not its slices, not its tail),
// other streams' appends commit, and appends to the same stream wait and then follow it.
func TestHugeRecordIsInvisibleUntilWholeAndOthersCommitBeside(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	createStream(t, s, "/huge", "application/json")
	createStream(t, s, "/small", "application/json")
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: []byte(`{"first":1}`)}); err != nil {
		t.Fatal(err)
	}
	body, joined := hugeJSON(10_000)
	reached, proceed, done := pausedHugeAppend(t, s, ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: body})
	<-reached

	if n := countRows(t, s, `SELECT count(*) FROM records WHERE stream_id = ?`, streamIDOf(t, s, "/huge")); n != 4 {
		t.Fatalf("rows of /huge mid-append: %d, want the first record and 3 hidden slices", n)
	}
	if got, count, tail := readWhole(t, s, "/huge"); string(got) != `{"first":1}` || count != 1 || tail != 1 {
		t.Fatalf("read mid-append: %d messages, tail %d (%.60s); want only the first message, tail 1", count, tail, got)
	}
	if res, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/small", ContentType: "application/json", Body: []byte(`{"s":1}`)}); err != nil || res.Tail != 1 {
		t.Fatalf("append to another stream beside the huge one: %+v, %v", res, err)
	}
	sameStream := make(chan error, 1)
	var sameRes AppendResult
	go func() {
		var err error
		sameRes, err = s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: []byte(`{"last":1}`)})
		sameStream <- err
	}()
	waitFor(t, func() bool { return parkedWrites(s) == 1 })

	proceed()
	if err := <-done; err != nil {
		t.Fatalf("huge append: %v", err)
	}
	if err := <-sameStream; err != nil || sameRes.Tail != 10_002 {
		t.Fatalf("the append that waited: tail %d, %v; want 10002 (after the huge record)", sameRes.Tail, err)
	}
	want := `{"first":1},` + joined + `,{"last":1}`
	if got, count, _ := readWhole(t, s, "/huge"); string(got) != want || count != 10_002 {
		t.Fatalf("read after: %d messages, want 10002 in order", count)
	}
	if n := hiddenMarks(t, s); n != 0 {
		t.Fatalf("%d streams still carry a visibility mark", n)
	}
}

// A huge append whose client goes away between slices writes nothing visible, leaves no hidden
// slices behind, and the stream takes appends afterwards.
func TestHugeAppendCancelledMidSlicesLeavesNothing(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	createStream(t, s, "/huge", "application/octet-stream")
	ctx, cancel := context.WithCancel(context.Background())
	reached, proceed, done := pausedHugeAppend(t, s, ctx, AppendRequest{Path: "/huge", ContentType: "application/octet-stream",
		Body: bytes.Repeat([]byte{7}, 2<<20)})
	<-reached
	cancel()
	proceed()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled huge append: got %v, want context.Canceled", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM records`); n != 0 {
		t.Fatalf("%d record rows left behind", n)
	}
	if n := hiddenMarks(t, s); n != 0 {
		t.Fatalf("%d streams still carry a visibility mark", n)
	}
	res, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "/huge", ContentType: "application/octet-stream", Body: []byte("abc")})
	if err != nil || res.Tail != 3 {
		t.Fatalf("append after: tail %d, %v; want 3", res.Tail, err)
	}
}

// Closing the store while a huge append is between slices answers the writes parked behind it
// with ErrStoreClosed, and the hidden slices never become visible: the next Open drops them.
func TestCloseDuringHugeAppendRefusesParkedWrites(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createStream(t, s, "/huge", "application/octet-stream")
	reached, proceed, done := pausedHugeAppend(t, s, ctx, AppendRequest{Path: "/huge", ContentType: "application/octet-stream",
		Body: bytes.Repeat([]byte{7}, 2<<20)})
	<-reached
	parked := make(chan error, 1)
	go func() {
		_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/huge", ContentType: "application/octet-stream", Body: []byte("x")})
		parked <- err
	}()
	waitFor(t, func() bool { return parkedWrites(s) == 1 })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-parked; !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("parked write: got %v, want ErrStoreClosed", err)
	}
	proceed()
	if err := <-done; !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("huge append: got %v, want ErrStoreClosed", err)
	}
	s2, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	if n := countRows(t, s2, `SELECT count(*) FROM records`); n != 0 {
		t.Fatalf("%d record rows after reopening, want the hidden slices dropped", n)
	}
	if _, _, tail := readWhole(t, s2, "/huge"); tail != 0 {
		t.Fatalf("tail after reopening: %d, want 0", tail)
	}
}

// A process killed (SIGKILL) while a huge record is half written leaves hidden slices in the
// file; readers of that file never see them, and the next Open drops them and clears the mark.
func TestCrashMidHugeRecordLeavesNoVisibleHalfRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	// The child waits on its stdin until it is killed.
	cmd, _ := startChild(t, "TestHelperCrashMidHugeRecord", "FOLDSTREAM_CRASH_STORE="+path, "sliced")
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred cleanup runs
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The file as the crash left it: the slices are there, hidden behind the stream's mark.
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	var rows, marks int
	if err := raw.QueryRow(`SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM streams WHERE hidden_from IS NOT NULL)`).Scan(&rows, &marks); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if rows != 4 || marks != 1 {
		t.Fatalf("after the crash: %d record rows and %d marks, want the first record, 3 hidden slices and 1 mark", rows, marks)
	}

	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got, count, tail := readWhole(t, s, "/huge"); string(got) != `{"first":1}` || count != 1 || tail != 1 {
		t.Fatalf("read after the crash: %d messages, tail %d; want only the first message", count, tail)
	}
	if n := countRows(t, s, `SELECT count(*) FROM records`); n != 1 {
		t.Fatalf("%d record rows after reopening, want the hidden slices dropped", n)
	}
	if n := hiddenMarks(t, s); n != 0 {
		t.Fatalf("%d marks after reopening", n)
	}
	body, joined := hugeJSON(10_000)
	if res, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "/huge", ContentType: "application/json", Body: body}); err != nil || res.Tail != 10_001 {
		t.Fatalf("the huge append again: tail %d, %v; want 10001", res.Tail, err)
	}
	if got, count, _ := readWhole(t, s, "/huge"); string(got) != `{"first":1},`+joined || count != 10_001 {
		t.Fatalf("read after the retry: %d messages, want 10001 in order", count)
	}
}

// TestHelperCrashMidHugeRecord is the child of TestCrashMidHugeRecordLeavesNoVisibleHalfRecord:
// it appends one message and starts a huge append to /huge that stops after its third hidden
// slice, says "sliced", and waits to be killed.
func TestHelperCrashMidHugeRecord(t *testing.T) {
	path := os.Getenv("FOLDSTREAM_CRASH_STORE")
	if path == "" {
		t.Skip("helper process for TestCrashMidHugeRecordLeavesNoVisibleHalfRecord")
	}
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createStream(t, s, "/huge", "application/json")
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: []byte(`{"first":1}`)}); err != nil {
		t.Fatal(err)
	}
	body, _ := hugeJSON(10_000)
	reached, _, _ := pausedHugeAppend(t, s, ctx, AppendRequest{Path: "/huge", ContentType: "application/json", Body: body})
	<-reached
	fmt.Println("sliced")
	_, _ = io.Copy(io.Discard, os.Stdin) // killed while waiting here
	t.Fatal("the parent did not kill this process")
}
