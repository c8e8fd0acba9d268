package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// The crash test: a child process (this test binary re-executed with crashChildEnv set) appends
// single and grouped batches from many goroutines while processors run on the same file; the
// parent kills it with SIGKILL at random points, many rounds, and after each round checks that
//
//   - every acknowledged append (the child prints "ACK <keys>" only after Append returned) is in the
//     log exactly once;
//   - no batch is partly visible (each event carries its batch's id and size);
//   - each processor's checkpoint, when one was written, is consistent with the log: its count
//     equals the number of consumed durable events up to its cursor (nothing skipped, nothing
//     reduced twice);
//
// and, after the last round, that rounds acknowledged appends at all and that the next
// incarnation resumes from the checkpoints: it catches up to the head and leaves a checkpoint
// there that counts every consumed event once.

const crashChildEnv = "FOLDSTREAM_CRASH_CHILD"

var crashPaths = []string{"/crash/a", "/crash/b"}

type crashState struct {
	Count int   `json:"count"`
	Last  int64 `json:"last"`
}

type crashCounter struct{ foldstream.Base[crashState] }

func newCrashCounter(t testing.TB) *crashCounter {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[crashState]{Slug: "count", Version: "1", Consumes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	return &crashCounter{Base: foldstream.NewBase(c)}
}

func (p *crashCounter) Reduce(a foldstream.ReduceArgs[crashState]) (crashState, bool, error) {
	if a.Event.Ephemeral {
		return a.State, false, nil // pushed live, never in the log: not counted
	}
	if a.Event.Offset <= a.State.Last {
		// Reducing a durable event twice would be a bug; make it visible in the state.
		return crashState{Count: a.State.Count - 1_000_000, Last: a.State.Last}, true, nil
	}
	return crashState{Count: a.State.Count + 1, Last: a.Event.Offset}, true, nil
}

func (p *crashCounter) ProjectLiveState(crashState) (any, error) { return nil, nil }

type crashPayload struct {
	Batch string `json:"batch"`
	Size  int    `json:"size"`
}

// TestCrashChild is the child's body; it only runs when re-executed by TestCrashRecovery.
func TestCrashChild(t *testing.T) {
	file := os.Getenv(crashChildEnv)
	if file == "" {
		t.Skip("runs only as the crash test's child process")
	}
	round := os.Getenv("FOLDSTREAM_CRASH_ROUND")
	ctx := context.Background()
	s, err := storeopen.Open(context.Background(), file, storeopen.Config{Store: stream.Config{Logger: quietLog}})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	for _, p := range crashPaths {
		if _, err := host.Register(ctx, h, p, newCrashCounter(t)); err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
	}
	var outMu sync.Mutex
	say := func(line string) {
		outMu.Lock()
		os.Stdout.WriteString(line + "\n")
		outMu.Unlock()
	}
	say("READY")
	for w := range 8 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(len(round))))
			for seq := 0; ; seq++ {
				path := crashPaths[rng.IntN(len(crashPaths))]
				size := 1
				if rng.IntN(3) == 0 {
					size = 2 + rng.IntN(6)
				}
				batch := fmt.Sprintf("r%s-w%d-%d", round, w, seq)
				in := make([]foldtype.EventInput, 0, size+1)
				keys := make([]string, 0, size)
				for i := range size {
					key := fmt.Sprintf("%s-%d", batch, i)
					typ := "a"
					if i%3 == 2 {
						typ = "b"
					}
					in = append(in, foldtype.EventInput{Type: typ, IdempotencyKey: key,
						Payload: foldtype.JSON(crashPayload{Batch: batch, Size: size})})
					keys = append(keys, key)
				}
				if rng.IntN(4) == 0 {
					in = append(in, foldtype.EventInput{Type: "a", Ephemeral: true})
				}
				if _, err := s.Events().Stream(path).Append(ctx, in...); err != nil {
					say("ERR " + err.Error())
					return
				}
				say("ACK " + path + " " + strings.Join(keys, " "))
			}
		}()
	}
	select {} // until killed
}

func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	file := filepath.Join(t.TempDir(), "crash.db")
	acked := map[string]string{} // key → path
	budget := 20 * time.Second
	if raceEnabled {
		budget = 20 * time.Second
	}
	start := time.Now()
	rounds, ackedRounds := 0, 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for time.Since(start) < budget && rounds < 80 {
		rounds++
		killAfter := rng.IntN(400) // acks to wait for before the kill; 0 kills right after READY
		roundAcked := runCrashChild(t, file, rounds, killAfter, rng, acked)
		if len(roundAcked) > 0 {
			ackedRounds++
		}
		verifyCrashFile(t, file, acked, rounds, roundAcked)
	}
	t.Logf("crash test: %d rounds (%d with acknowledged appends), %d acknowledged events, %s", rounds, ackedRounds, len(acked), time.Since(start).Round(time.Millisecond))
	if rounds < 5 {
		t.Fatalf("only %d rounds ran", rounds)
	}
	// The checks above are about acknowledged appends: a run in which the child was always killed
	// before its first acknowledgement would have checked none.
	if ackedRounds < 2 {
		t.Fatalf("only %d of %d rounds acknowledged an append before the kill, want at least 2", ackedRounds, rounds)
	}
	verifyFinalCheckpoints(t, file, acked)
}

// verifyFinalCheckpoints opens the file once more, as the next incarnation after the last kill:
// each processor catches up to the head of its stream and, once the host has shut down, its
// checkpoint exists, is at the head, and counts every consumed event of the log once.
func verifyFinalCheckpoints(t *testing.T, file string, acked map[string]string) {
	t.Helper()
	ctx := context.Background()
	s, err := storeopen.Open(ctx, file, storeopen.Config{Store: stream.Config{Logger: quietLog}})
	if err != nil {
		t.Fatalf("final reopen: %v", err)
	}
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range crashPaths {
		if _, err := host.Register(ctx, h, p, newCrashCounter(t)); err != nil {
			t.Fatal(err)
		}
	}
	heads := map[string]int64{}
	for _, p := range crashPaths {
		events := readAllCrash(t, s, p, "final")
		heads[p] = events[len(events)-1].Offset
		if err := h.WaitUntilProcessed(ctx, p, "count", heads[p], time.Minute); err != nil {
			t.Fatalf("final incarnation: %s not processed through %d: %v", p, heads[p], err)
		}
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range crashPaths {
		events := readAllCrash(t, s, p, "final")
		as := 0
		for _, e := range events {
			if e.Type == "a" {
				as++
			}
		}
		cps, err := s.Events().Checkpoints(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		cp, ok, err := cps.ReadCheckpoint(ctx, "count")
		if err != nil || !ok || cp.State == nil {
			t.Fatalf("final incarnation: %s has no checkpoint of count (%v, %v) after processing through %d", p, ok, err, heads[p])
		}
		var st crashState
		if err := json.Unmarshal(cp.State, &st); err != nil {
			t.Fatal(err)
		}
		if cp.ReducedThroughOffset < heads[p] || st.Count != as {
			t.Fatalf("final incarnation: %s checkpoint at %d counts %d, want at least %d counting the log's %d consumed events", p, cp.ReducedThroughOffset, st.Count, heads[p], as)
		}
	}
	if len(acked) == 0 {
		t.Fatal("no append was acknowledged in any round")
	}
}

// readAllCrash reads every event of the stream at path.
func readAllCrash(t *testing.T, s *stream.Store, path, round string) []foldtype.Event {
	t.Helper()
	var events []foldtype.Event
	for after := int64(0); ; {
		p, err := s.Events().Stream(path).Read(context.Background(), after, 1000)
		if err != nil {
			t.Fatalf("round %s: read %s: %v", round, path, err)
		}
		events = append(events, p.Events...)
		if p.AtHead {
			return events
		}
		after = p.ScannedThroughOffset
	}
}

// runCrashChild runs one round: a child appending until it is killed. It returns the keys the child
// acknowledged in this round (also added to acked, key → path).
func runCrashChild(t *testing.T, file string, round, killAfter int, rng *rand.Rand, acked map[string]string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+file, "FOLDSTREAM_CRASH_ROUND="+strconv.Itoa(round))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	ready := false
	n := 0
	var roundAcked []string
	var once sync.Once
	kill := func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL) }) }
	hang := time.AfterFunc(time.Minute, kill) // a child that never gets ready
	defer hang.Stop()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "READY":
			ready = true
			if killAfter == 0 {
				kill()
			}
			// The kill comes after killAfter acks or at a random moment, whichever is first.
			timer = time.AfterFunc(time.Duration(100+rng.IntN(1500))*time.Millisecond, kill)
		case strings.HasPrefix(line, "ACK "):
			f := strings.Fields(line)
			for _, k := range f[2:] {
				acked[k] = f[1]
				roundAcked = append(roundAcked, k)
			}
			n++
			if n >= killAfter {
				kill()
			}
		case strings.HasPrefix(line, "ERR "):
			kill()
			t.Fatalf("round %d: child failed: %s", round, line)
		}
	}
	kill()
	_ = cmd.Wait()
	if !ready {
		t.Fatalf("round %d: the child never got ready", round)
	}
	return roundAcked
}

func verifyCrashFile(t *testing.T, file string, acked map[string]string, round int, roundAcked []string) {
	t.Helper()
	ctx := context.Background()
	s, err := storeopen.Open(context.Background(), file, storeopen.Config{Store: stream.Config{Logger: quietLog}})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close(context.Background())
	seen := map[string]int{}
	for _, path := range crashPaths {
		events := readAllCrash(t, s, path, strconv.Itoa(round))
		batches := map[string][2]int{} // batch → {seen, size}
		for _, e := range events {
			if e.IdempotencyKey != "" {
				seen[e.IdempotencyKey]++
				if want := acked[e.IdempotencyKey]; want != "" && want != path {
					t.Fatalf("round %d: key %s on %s, acked on %s", round, e.IdempotencyKey, path, want)
				}
				var pl crashPayload
				if err := json.Unmarshal(e.Payload, &pl); err != nil {
					t.Fatalf("round %d: payload %s: %v", round, e.Payload, err)
				}
				b := batches[pl.Batch]
				batches[pl.Batch] = [2]int{b[0] + 1, pl.Size}
			}
		}
		for id, b := range batches {
			if b[0] != b[1] {
				t.Fatalf("round %d: batch %s partly visible: %d of %d events", round, id, b[0], b[1])
			}
		}
		cps, err := s.Events().Checkpoints(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		cp, ok, err := cps.ReadCheckpoint(ctx, "count")
		if err != nil {
			t.Fatalf("round %d: checkpoint: %v", round, err)
		}
		if ok && cp.State != nil {
			var st crashState
			if err := json.Unmarshal(cp.State, &st); err != nil {
				t.Fatal(err)
			}
			// The count of "a" events at or below the cursor.
			want := 0
			for _, e := range events {
				if e.Offset <= cp.ReducedThroughOffset && e.Type == "a" {
					want++
				}
			}
			if st.Count != want {
				t.Fatalf("round %d: %s checkpoint at %d counts %d, the log has %d consumed events up to it", round, path, cp.ReducedThroughOffset, st.Count, want)
			}
		}
	}
	// This round's acknowledged appends, then every earlier round's, are each in the log once.
	for _, k := range roundAcked {
		if seen[k] != 1 {
			t.Fatalf("round %d: key %s, acknowledged in this round, present %d times, want 1", round, k, seen[k])
		}
	}
	for k := range acked {
		if seen[k] != 1 {
			t.Fatalf("round %d: acknowledged key %s present %d times, want 1", round, k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("round %d: key %s present %d times", round, k, n)
		}
	}
}
