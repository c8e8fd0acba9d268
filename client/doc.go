// Package client is a Go client for the Durable Streams HTTP protocol (docs/server.md describes
// the protocol as foldstream serves it; docs/client.md this package) and an exactly-once
// IdempotentProducer. It needs nothing from the rest of the module, so it can talk to any
// conforming server.
//
// # Streams
//
// A [Stream] is a handle to one stream URL; creating it sends nothing:
//
//	s, _ := client.NewStream("http://127.0.0.1:4437/v1/stream/orders", client.Config{})
//	s.Create(ctx, client.CreateOptions{ContentType: "application/json", TTL: time.Hour})
//	s.AppendJSON(ctx, map[string]any{"id": 1})
//	s.Close(ctx, nil) // readers see EOF
//
// Every call takes a context first. Errors are typed and coded with the server's own codes (its
// Foldstream-Error-Code header, named as in package foldstream; derived from the status for
// servers that send none, see [Code]): use errors.Is with [ErrStreamNotFound], [ErrConflict],
// [ErrStreamGone], [ErrTooLarge], [ErrStreamClosed], [ErrUnauthorized] and friends, or errors.As with
// [*Error] (status, URL, server message), [*StreamClosedError] (FinalOffset), [*StaleEpochError]
// (CurrentEpoch) and [*SequenceGapError] (ExpectedSeq, ReceivedSeq).
//
// # Reads
//
// [Stream.Read] returns an iter.Seq2 over [Chunk]s; [Stream.Messages] and [ReadJSON] iterate
// over a JSON stream's messages. Catch-up reads ([LiveNone]) follow Stream-Next-Offset until
// Stream-Up-To-Date; [LiveLongPoll], [LiveSSE] and [LiveAuto] keep following until the stream is
// closed or the context ends; a read its context ends yields ctx.Err() as its last pair. Query parameters are sorted and the server's cursor is echoed
// (docs/server.md#caching-and-the-cursor). SSE connections that the server ends are resumed from the last streamNextOffset,
// never after streamClosed. Reads, HEAD and PUT retry 429, 5xx and network errors with jittered
// exponential backoff, honouring Retry-After ([RetryPolicy]). The SSE parser treats CRLF, LF and
// lone CR alike, also when a CRLF is split across two network reads; it joins multi-line data,
// decodes base64 streams (stream-sse-data-encoding) and pairs each data event with the control
// event after it.
//
// # Idempotent producer
//
// [IdempotentProducer] batches messages in the background (linger 5 ms, batches up to 1 MiB, at
// most 5 batches in flight; JSON streams send a batch as one array, other streams concatenate)
// and tags each batch with (Producer-Id, Producer-Epoch, Producer-Seq), so the server stores
// every message exactly once and in order. Compared with the TypeScript producer it ports
// (@durable-streams/client 0.1.4), it improves on these points:
//
//   - A restart never loses new data: by default each producer starts a fresh epoch (the clock's
//     Unix milliseconds, claimed above the server's), where the TypeScript producer starts at
//     epoch 0 and a restarted process's new batches are answered as duplicates of the previous
//     run's and dropped. ProducerConfig.Resume continues an earlier session on purpose.
//   - Retries instead of giving up: a network error, a 429 or a 5xx resends the same (epoch, seq)
//     with backoff. This is safe because the server deduplicates: a batch that was applied but
//     whose response was lost is acknowledged as a duplicate (204), not written twice.
//   - Honest counters: [IdempotentProducer.InFlightCount] counts requests on the wire, not queue
//     entries; [IdempotentProducer.PendingCount] counts messages not yet sent.
//   - Errors are not swallowed: [IdempotentProducer.Flush] and [IdempotentProducer.Close] return
//     the first delivery error (OnError also receives it, once). After an error the producer stops
//     sending in that epoch, because no later seq could land; [IdempotentProducer.Restart] starts a
//     new epoch to continue.
//   - Clean cancellation: if Close's context ends first, requests still running are cancelled and
//     Close returns; everything the server acknowledged stays acknowledged, and nothing is
//     reported as delivered that was not.
//   - Bounded memory: appended-but-unacknowledged bytes are capped (MaxBufferedBytes, 64 MiB by
//     default); [IdempotentProducer.Append] blocks, and [IdempotentProducer.AppendContext] gives
//     up when its context ends, instead of growing without end.
//   - Auto-claim cannot race the pipeline: until the first batch succeeds only one request is in
//     flight, so the 403 → epoch+1 → seq 0 claim never meets a pipelined batch of the old epoch.
//     A 403 after the claim means a newer producer fenced this one; it is reported as
//     [*StaleEpochError] rather than fought over.
//   - Bigger batches under load: a batch whose linger elapsed is sealed only when a request slot
//     is free, so a saturated pipeline sends fewer, larger requests instead of queueing many small
//     ones.
//   - Invalid JSON is refused at Append, so one bad message cannot make the server reject a whole
//     batch of good ones.
//   - The SSE parser's CRLF fix also covers a CR and LF that arrive in different reads.
//
// Plain [Stream.Append] is retried only on 429/5xx answers, never after a network error (the
// append may have been applied); use a producer for exactly-once writes.
package client
