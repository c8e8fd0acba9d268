package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A refusal's problem body is printed clearly: the error's line carries the detail (never the
// JSON), and each schema violation follows on a line of its own with the message's index and the
// value's JSON pointer, then how many more there were.
func TestCLIPrintsEveryViolationOfARefusedBatch(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Stream-Next-Offset", "0000000000000000_0000000000000000")
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Foldstream-Error-Code", "INVALID_EVENT")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"type":"https://foldstream.dev/errors/INVALID_EVENT","title":"Invalid event","status":400,` +
			`"code":"INVALID_EVENT","detail":"3 schema violation(s) in the batch","violationsTotal":3,"violationsTruncated":true,` +
			`"violations":[{"index":1,"pointer":"/payload/qty","message":"must be >= 1 but found 0"},` +
			`{"index":3,"pointer":"/payload","message":"missing properties: 'sku'"}]}`))
	}))
	defer ts.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"append", "--server", ts.URL, "orders", `{"n":1}`}, &out, &errOut)
	got := errOut.String()
	if code != 1 {
		t.Fatalf("exit %d, stderr %q", code, got)
	}
	for _, want := range []string{"INVALID_EVENT (400)", "3 schema violation(s) in the batch",
		"\n  message 1 at /payload/qty: must be >= 1 but found 0\n", "\n  message 3 at /payload: missing properties: 'sku'\n",
		"\n  … and 1 more violation(s)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"violations"`) {
		t.Errorf("stderr shows the JSON body:\n%s", got)
	}
}
