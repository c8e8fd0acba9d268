package node

import (
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// TestANodeTracesNothingWithoutAnEndpoint: with no OTLPEndpoint and no OTEL variable the node
// makes no tracer provider (tracing off costs nothing).
func TestANodeTracesNothingWithoutAnEndpoint(t *testing.T) {
	t.Setenv(EnvOTLPEndpoint, "")
	t.Setenv(EnvOTLPTracesEndpoint, "")
	tp, shutdown, err := otlpTracing(t.Context(), "", 1, "")
	if err != nil || tp != nil {
		t.Fatalf("otlpTracing with no endpoint = %v, %v; want no provider", tp, err)
	}
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestANodeRefusesABadTraceSampleRatio: a ratio outside 0..1 is INVALID_CONFIG.
func TestANodeRefusesABadTraceSampleRatio(t *testing.T) {
	two := 2.0
	_, _, err := Config{OTLPEndpoint: "http://127.0.0.1:1", TraceSampleRatio: &two}.withDefaults()
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeInvalidConfig {
		t.Errorf("a sample ratio of 2: %v, want INVALID_CONFIG", err)
	}
}
