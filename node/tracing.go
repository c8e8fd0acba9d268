package node

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/foldstream/foldstream/internal/spanbatch"
)

// The OpenTelemetry environment variables a node honours when Config.OTLPEndpoint is empty: with
// either set, spans are exported over OTLP/HTTP as when OTLPEndpoint is given (their companions —
// headers, timeout, compression — are read by the exporter).
const (
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// otlpTracing returns the tracer provider a node uses when it was given none, exporting spans in batches over
// OTLP/HTTP to endpoint (a base URL such as http://127.0.0.1:4318; the exporter posts to its
// /v1/traces), or, when endpoint is empty, to what the OTEL_EXPORTER_OTLP_* variables name. It
// returns nil (tracing off, no cost) when neither names an endpoint. ratio is the share of new
// traces sampled; a request that carries a sampled traceparent is traced whatever the ratio.
// shutdown flushes the spans still batched.
func otlpTracing(ctx context.Context, endpoint string, ratio float64, nodeID string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if endpoint == "" && os.Getenv(EnvOTLPEndpoint) == "" && os.Getenv(EnvOTLPTracesEndpoint) == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The resource names the service by OpenTelemetry's semantic conventions.
	kv := []attribute.KeyValue{attribute.String("service.name", "foldstream"), attribute.String("service.version", Version())}
	if nodeID != "" {
		kv = append(kv, attribute.String("service.instance.id", nodeID))
	}
	res, err := resource.New(ctx, resource.WithAttributes(kv...))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace resource: %w", err)
	}
	p := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(spanbatch.New(exp, spanbatch.Options{BatchTimeout: time.Second})),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return p, p.Shutdown, nil
}

// Version is the foldstream module's version as the go command stamped it into the program,
// "(devel)" when it did not (a build from a checkout).
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
