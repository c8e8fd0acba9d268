package foldtype_test

import (
	"encoding/json"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

const (
	parentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	parentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// A retried emission carries the trace context of the retry's span, not the first one's: it is
// still the same event, whatever else the metadata holds, and a real difference outside the
// trace context still tells two events apart.
func TestTraceContextIsNotPartOfAnEventsIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		stored, retry string // metadata; "" is absent
		same          bool
	}{
		{"other span", `{"traceparent":"` + parentA + `"}`, `{"traceparent":"` + parentB + `"}`, true},
		{"trace state too", `{"traceparent":"` + parentA + `","tracestate":"k=v"}`, `{"traceparent":"` + parentB + `"}`, true},
		{"untraced retry", `{"traceparent":"` + parentA + `"}`, "", true},
		{"untraced first", "", `{"traceparent":"` + parentB + `"}`, true},
		{"empty object against trace only", `{}`, `{"traceparent":"` + parentB + `"}`, true},
		{"same other members", `{"traceparent":"` + parentA + `","who":"x"}`, `{"who":"x","traceparent":"` + parentB + `"}`, true},
		{"other members differ", `{"traceparent":"` + parentA + `","who":"x"}`, `{"traceparent":"` + parentB + `","who":"y"}`, false},
		{"a member only on one side", `{"traceparent":"` + parentA + `","who":"x"}`, `{"traceparent":"` + parentB + `"}`, false},
		{"not an object", `"traceparent"`, `{"traceparent":"` + parentB + `"}`, false},
		{"untraced, absent against empty", "", `{}`, false},
	} {
		stored := foldtype.Event{Type: "t", Metadata: raw(tc.stored)}
		retry := foldtype.EventInput{Type: "t", Metadata: raw(tc.retry)}
		if got := foldtype.SameIdempotentEvent(stored, retry); got != tc.same {
			t.Errorf("%s: SameIdempotentEvent(%s, %s) = %v, want %v", tc.name, tc.stored, tc.retry, got, tc.same)
		}
	}
}

// WithTraceContext adds the trace context to metadata that names none, keeping the rest of the
// object's bytes, and leaves metadata that already names one (the writer's own) as it is.
func TestWithTraceContextAddsTheTraceOnlyWhereNoneIsNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, state, want string }{
		{"", "", `{"traceparent":"` + parentA + `"}`},
		{"null", "", `{"traceparent":"` + parentA + `"}`},
		{`{}`, "", `{"traceparent":"` + parentA + `"}`},
		{`{"who":"x"}`, "k=v", `{"traceparent":"` + parentA + `","tracestate":"k=v","who":"x"}`},
		{`{"traceparent":"` + parentB + `"}`, "", `{"traceparent":"` + parentB + `"}`},
		{`[1]`, "", `[1]`},
	} {
		got := foldtype.WithTraceContext(raw(tc.in), parentA, tc.state)
		if string(got) != tc.want {
			t.Errorf("WithTraceContext(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("WithTraceContext(%s) = %s: not JSON", tc.in, got)
		}
	}
	if got := foldtype.WithTraceContext(raw(`{"who":"x"}`), "", ""); string(got) != `{"who":"x"}` {
		t.Errorf("without a traceparent: %s, want the metadata unchanged", got)
	}
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}
