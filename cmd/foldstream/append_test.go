package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// runAppendCmd runs `foldstream append` with in as stdin and returns stdout, stderr and the error.
func runAppendCmd(t *testing.T, ctx context.Context, in string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	stdin = strings.NewReader(in)
	err := commands["append"].run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func newJSONStream(t *testing.T, ctx context.Context, base string) string {
	t.Helper()
	name := fmt.Sprintf("lines-%d", time.Now().UnixNano())
	if _, _, err := runAppendCmd(t, ctx, "", "--server", base, "--create", "--content-type", "application/json", name, `{"n":0}`); err != nil {
		t.Fatal(err)
	}
	return name
}

func readAll(t *testing.T, ctx context.Context, base, name string) string {
	t.Helper()
	out, err := runCmd(t, ctx, "read", "", "--server", base, name)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return out
}

// Rerunning `append --lines` with the same --producer-id and new input stores the new input (each
// run takes the id over with a new epoch) and says how many messages it stored.
func TestAppendLinesWithReusedProducerIDStoresNewInput(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := newJSONStream(t, ctx, base)

	first := "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n{\"a\":5}\n"
	if _, stderr, err := runAppendCmd(t, ctx, first, "--server", base, "--lines", "--producer-id", "importer", name); err != nil || !strings.Contains(stderr, "stored 5 messages, 0 already present") {
		t.Fatalf("first run: %v, stderr %q", err, stderr)
	}
	second := "{\"b\":1}\n{\"b\":2}\n{\"b\":3}\n{\"b\":4}\n{\"b\":5}\n"
	_, stderr, err := runAppendCmd(t, ctx, second, "--server", base, "--lines", "--producer-id", "importer", name)
	if err != nil || !strings.Contains(stderr, "stored 5 messages, 0 already present") {
		t.Fatalf("second run: %v, stderr %q", err, stderr)
	}
	want := "{\"n\":0}\n" + first + second
	if got := readAll(t, ctx, base, name); got != want {
		t.Fatalf("stream holds %q, want %q", got, want)
	}
}

// A producer id the server knows at a higher epoch (another writer took it over) is taken over
// again: the input is stored, never acknowledged as a duplicate.
func TestAppendLinesTakesOverAProducerIDAtAHigherEpoch(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := newJSONStream(t, ctx, base)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/stream/"+name, strings.NewReader(`{"other":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Producer-Id", "importer")
	req.Header.Set("Producer-Epoch", "9000000000000")
	req.Header.Set("Producer-Seq", "0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("seed producer: status %d", res.StatusCode)
	}
	_, stderr, err := runAppendCmd(t, ctx, "{\"b\":1}\n{\"b\":2}\n", "--server", base, "--lines", "--producer-id", "importer", name)
	if err != nil || !strings.Contains(stderr, "stored 2 messages, 0 already present") || !strings.Contains(stderr, "epoch 9000000000001") {
		t.Fatalf("append: %v, stderr %q", err, stderr)
	}
	if got, want := readAll(t, ctx, base, name), "{\"n\":0}\n{\"other\":1}\n{\"b\":1}\n{\"b\":2}\n"; got != want {
		t.Fatalf("stream holds %q, want %q", got, want)
	}
}

// --resume-epoch reruns the same input of an earlier run: what that run stored is skipped and
// counted as already present, the rest is stored once.
func TestAppendLinesResumeEpochSkipsWhatTheEarlierRunStored(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := newJSONStream(t, ctx, base)

	// The earlier run.
	_, stderr, err := runAppendCmd(t, ctx, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n", "--server", base, "--lines", "--producer-id", "importer", name)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`epoch (\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the run did not print its epoch: %q", stderr)
	}
	// Rerun the identical input in that epoch: batches are cut by size only, so the rerun's
	// batch 0 is the earlier run's batch 0, and the server answers it as a duplicate.
	_, stderr, err = runAppendCmd(t, ctx, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n", "--server", base, "--lines", "--producer-id", "importer", "--resume-epoch", m[1], name)
	if err != nil || !strings.Contains(stderr, "stored 0 messages, 3 already present") {
		t.Fatalf("resume: %v, stderr %q", err, stderr)
	}
	if got, want := readAll(t, ctx, base, name), "{\"n\":0}\n{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n"; got != want {
		t.Fatalf("stream holds %q, want %q", got, want)
	}
}

// A bad line stops `append --lines`: the error names its line number and how many messages
// before it were stored.
func TestAppendLinesNamesTheBadLine(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	name := newJSONStream(t, ctx, base)
	_, stderr, err := runAppendCmd(t, ctx, "{\"a\":1}\n\n{\"a\":2}\n{oops\n{\"a\":3}\n", "--server", base, "--lines", "--producer-id", "importer", name)
	if err == nil || !strings.Contains(err.Error(), "line 4:") || !strings.Contains(err.Error(), "of the 2 messages before it, 2 were stored") {
		t.Fatalf("got %v (stderr %q), want an error naming line 4 and 2 stored", err, stderr)
	}
	if got, want := readAll(t, ctx, base, name), "{\"n\":0}\n{\"a\":1}\n{\"a\":2}\n"; got != want {
		t.Fatalf("stream holds %q, want %q", got, want)
	}
}
