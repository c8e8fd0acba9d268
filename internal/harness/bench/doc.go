// Package bench is the side-by-side performance harness that compares foldstream's Durable
// Streams HTTP server with the reference Node server (@durable-streams/server, file-backed store).
//
// One load generator (cmd/dsbench) starts both servers on loopback and drives each with the same
// load: concurrent plain appends, pipelined idempotent-producer batches, a full catch-up read of a
// large stream, and POST→SSE latency. Each scenario is measured in several rounds that alternate
// which server goes first, and the report quotes the median of the rounds with the ratio
// foldstream/reference measured in the same run. See docs/bench.md.
//
// Everything here is bounded: every scenario has a message count and a deadline, and servers bind
// to 127.0.0.1 only.
package bench
