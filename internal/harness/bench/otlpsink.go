package bench

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// OTLPSink is an OpenTelemetry collector that keeps nothing: it answers every OTLP/HTTP export
// with success and counts what it was sent, so a traced server pays its whole exporting path
// (recording, batching, encoding, sending) while nothing downstream adds to the measurement.
type OTLPSink struct {
	// URL is the sink's base URL (http://127.0.0.1:PORT), for `foldstream serve --otlp-endpoint`.
	URL string

	exports atomic.Int64
	bytes   atomic.Int64
	srv     *http.Server
}

// StartOTLPSink serves an OTLPSink on a free loopback port until Close.
func StartOTLPSink() (*OTLPSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &OTLPSink{URL: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// serve reads an export and answers with an empty ExportTraceServiceResponse (an empty
// protobuf message: full success).
func (s *OTLPSink) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	s.exports.Add(1)
	s.bytes.Add(n)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// Received returns the exports and body bytes received so far.
func (s *OTLPSink) Received() (exports, bytes int64) { return s.exports.Load(), s.bytes.Load() }

// Close stops the sink.
func (s *OTLPSink) Close() error { return s.srv.Close() }
