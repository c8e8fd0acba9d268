package stream

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/testsupport"
)

// testT is the fake clock's start.
var testT = testsupport.T

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup opens an in-memory store with a fake clock. A producer sequence gap is answered at once
// (the reorder wait runs on the store's clock, which only the test moves).
// openStore opens a store on the SQLite file at path (":memory:" for a private one), as
// storeopen.Open does for a path.
func openStore(path string, opts Config) (*Store, error) { return openStoreSync(path, "", opts) }

// openStoreSync is openStore with SQLite's synchronous setting.
func openStoreSync(path, synchronous string, opts Config) (*Store, error) {
	ctx := context.Background()
	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: path, Synchronous: synchronous})
	if err != nil {
		return nil, err
	}
	s, err := OpenDriver(ctx, d, opts)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	return s, nil
}

func setup(t testing.TB) (*Store, *testsupport.FakeClock) {
	t.Helper()
	clk := testsupport.NewFakeClock()
	s, err := openStore(":memory:", Config{Clock: clk, Logger: quietLog, ProducerReorderWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, clk
}

// setupFile opens a store in a file under a temp dir.
func setupFile(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, path
}

func ev(typ string) foldtype.EventInput { return foldtype.EventInput{Type: typ} }

func eph(typ string) foldtype.EventInput { return foldtype.EventInput{Type: typ, Ephemeral: true} }

func offsets(evs []foldtype.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Offset
	}
	return out
}

func mustAppend(t testing.TB, s *Store, path string, in ...foldtype.EventInput) []foldtype.Event {
	t.Helper()
	out, err := s.Events().Stream(path).Append(context.Background(), in...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return out
}

func mustRead(t testing.TB, s *Store, path string, after int64, limit int, opts readOptions) foldtype.ReadPage {
	t.Helper()
	p, err := s.readEvents(context.Background(), path, after, limit, opts)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return p
}

func countRows(t testing.TB, s *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.rawQueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sqlite returns the store's SQLite driver (every test store runs on it).
func (s *Store) sqlite() *sqlitedriver.Driver { return s.drv.(*sqlitedriver.Driver) }

// rawQueryRow runs a one-row SQL query on a read connection of the store's SQLite file.
func (s *Store) rawQueryRow(query string, args ...any) *sql.Row {
	return testhooks.SQLiteQueryRow(context.Background(), s.sqlite(), query, args...)
}

// rawQuery runs a SQL query on a read connection of the store's SQLite file.
func (s *Store) rawQuery(query string, args ...any) (*sql.Rows, error) {
	return testhooks.SQLiteQuery(context.Background(), s.sqlite(), query, args...)
}

// savepoints counts the savepoints the writer opened: a write that ran no SQL opened none.
func (s *Store) savepoints() int64 { return testhooks.SQLiteSavepoints(s.sqlite()) }

// Exec runs a raw SQL statement inside the write function's savepoint (tests only).
func txExec(t *kernel.Tx, query string, args ...any) (sql.Result, error) {
	d, err := t.Begin()
	if err != nil {
		return nil, err
	}
	return d.(interface {
		Exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	}).Exec(context.Background(), query, args...)
}

// storedMessage is one message (or byte-record slice) as stored in the records table.
type storedMessage struct {
	StreamID, Offset, RecordStart int64
	Body                          string
}

// storedMessages lists every stored message of the store's file, by stream then offset.
func storedMessages(t testing.TB, s *Store) []storedMessage {
	t.Helper()
	rows, err := s.rawQuery(`SELECT r.stream_id, r.record_start, r.start_pos, r.end_pos, r.frames, r.body, s.content_type
		FROM records r JOIN streams s ON s.id = r.stream_id ORDER BY r.stream_id, r.end_pos`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedMessage
	for rows.Next() {
		var rec driver.Record
		var ct string
		if err := rows.Scan(&rec.StreamID, &rec.RecordStart, &rec.Start, &rec.End, &rec.Frames, &rec.Body, &ct); err != nil {
			t.Fatal(err)
		}
		if !IsJSONContentType(ct) {
			out = append(out, storedMessage{rec.StreamID, rec.End, rec.RecordStart, string(rec.Body)})
			continue
		}
		if err := driver.EachFrame(rec, func(off int64, msg []byte) bool {
			out = append(out, storedMessage{rec.StreamID, off, rec.RecordStart, string(msg)})
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// insertRawRecord stores JSON messages (any bytes) as one record at offsets after+1... of stream
// id, bypassing the store's checks: how a test plants data another writer could have left.
func insertRawRecord(t *kernel.Tx, id, after, createdMs int64, msgs ...string) error {
	rec := driver.Record{StreamID: id, RecordStart: after, Start: after, End: after + int64(len(msgs)), CreatedMs: createdMs}
	for i, m := range msgs {
		if i > 0 {
			rec.Body = append(rec.Body, ',')
		}
		rec.Frames = driver.AppendFrame(rec.Frames, 1, len(m))
		rec.Body = append(rec.Body, m...)
	}
	return t.Driver().InsertRecord(t.Context(), rec)
}

// QueryRow runs a raw one-row SQL query inside the write function's savepoint (tests only).
func txQueryRow(t *kernel.Tx, query string, args ...any) *sql.Row {
	d, err := t.Begin()
	if err != nil {
		panic(err)
	}
	return d.(interface {
		QueryRow(ctx context.Context, query string, args ...any) *sql.Row
	}).QueryRow(context.Background(), query, args...)
}

// streamIDOf returns the id of the stream at path.
func streamIDOf(t testing.TB, s *Store, path string) int64 {
	t.Helper()
	var id int64
	if err := s.rawQueryRow(`SELECT id FROM streams WHERE path = ?`, path).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFor yields until cond holds, failing t after about 10 s. It never sleeps: cond is a state
// another goroutine moves (a queue length, a counter), re-checked each time the scheduler comes back.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		runtime.Gosched()
	}
}

// failingCommitWrite is a write function that succeeds itself but makes its whole group's COMMIT
// fail: it leaves a deferred foreign-key violation behind, which SQLite reports only at COMMIT.
func failingCommitWrite(tx *kernel.Tx) error {
	if _, err := txExec(tx, `PRAGMA defer_foreign_keys = ON`); err != nil {
		return err
	}
	_, err := txExec(tx, `INSERT INTO streams(path, content_type, created_ms, last_access_ms, forked_from)
		VALUES ('/fk-violation', 'x', 0, 0, 987654321)`)
	return err
}

// groupWithFailingCommit runs the given writes in one group together with failingCommitWrite, so the
// group's COMMIT fails; it returns the writes' errors.
func groupWithFailingCommit(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	failing := func() error { return s.k.Write(context.Background(), failingCommitWrite) }
	errs := inOneGroup(t, s, append(fns, failing)...)
	if errs[len(fns)] == nil {
		t.Fatal("the group's commit did not fail")
	}
	return errs[:len(fns)]
}

// inOneGroup runs fns (each a call that queues one write) so that their writes share one group,
// in order: it holds the writer with a blocking write, queues them one by one, then releases it.
// It returns their errors.
func inOneGroup(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	release := make(chan struct{})
	held := make(chan struct{})
	go s.k.Write(context.Background(), func(tx *kernel.Tx) error { close(held); <-release; return nil }) //nolint:errcheck
	<-held
	errs := make([]chan error, len(fns))
	for i, fn := range fns {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- fn() }()
		waitFor(t, func() bool { return s.k.WriterQueue() >= i+1 })
	}
	close(release)
	out := make([]error, len(fns))
	for i := range fns {
		out[i] = <-errs[i]
	}
	return out
}

// startChild re-executes this test binary to run the helper test named test with env added to
// its environment, and waits until the child's first line of output is ready. It returns the
// running child (killed when the test ends, if it still runs) and its stdin, which the child may
// wait on.
func startChild(t *testing.T, test, env, ready string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill() // only if the test failed midway
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != ready {
		t.Fatalf("child %s: got %q, %v; want %q", test, line, err, ready)
	}
	return cmd, stdin
}
