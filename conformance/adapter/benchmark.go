package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/client"
)

type benchOp struct {
	Op          string `json:"op"`
	Path        string `json:"path"`
	Size        int    `json:"size"`
	Offset      string `json:"offset"`
	Live        string `json:"live"`
	ContentType string `json:"contentType"`
	Count       int    `json:"count"`
	Concurrency int    `json:"concurrency"`
}

type benchCommand struct {
	IterationID string  `json:"iterationId"`
	Operation   benchOp `json:"operation"`
}

// payload returns size bytes to append: filler bytes, or for a JSON stream a JSON string of that
// size (a JSON stream refuses anything else).
func payload(size int, contentType string) []byte {
	if !client.IsJSON(contentType) || size < 2 {
		return bytes.Repeat([]byte{42}, size)
	}
	return append(append([]byte{'"'}, bytes.Repeat([]byte{'x'}, size-2)...), '"')
}

// benchmark runs one timed operation of the suite's --bench mode with the same client calls a
// user would make.
func (a *adapter) benchmark(line []byte) result {
	var c benchCommand
	if err := json.Unmarshal(line, &c); err != nil {
		return errResult("benchmark", &client.Error{Code: client.CodeInvalidArgument, Message: err.Error()})
	}
	op := c.Operation
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, _, _ := a.stream(op.Path, nil, false)
	metrics := map[string]any{}
	start := time.Now()
	switch op.Op {
	case "append":
		if _, err := s.Append(ctx, payload(op.Size, s.ContentType())); err != nil {
			return errResult("benchmark", err)
		}
		metrics["bytesTransferred"] = op.Size
	case "read":
		n := 0
		for ch, err := range s.Read(ctx, client.ReadOptions{Offset: op.Offset}) {
			if err != nil {
				return errResult("benchmark", err)
			}
			n += len(ch.Data)
		}
		metrics["bytesTransferred"] = n
	case "create":
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: op.ContentType}); err != nil {
			return errResult("benchmark", err)
		}
	case "roundtrip":
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: op.ContentType}); err != nil {
			return errResult("benchmark", err)
		}
		live := client.LiveLongPoll
		if op.Live == "sse" {
			live = client.LiveSSE
		}
		got := make(chan int, 1)
		rctx, rcancel := context.WithCancel(ctx)
		go func() {
			defer close(got)
			for ch, err := range s.Read(rctx, client.ReadOptions{Live: live}) {
				if err != nil {
					return
				}
				if !ch.Empty() {
					got <- len(ch.Data)
					return
				}
			}
		}()
		if _, err := s.Append(ctx, payload(op.Size, op.ContentType)); err != nil {
			rcancel()
			return errResult("benchmark", err)
		}
		n := <-got
		rcancel()
		metrics["bytesTransferred"] = op.Size + n
	case "throughput_append":
		ct := a.contentTypes[op.Path]
		s.Create(ctx, client.CreateOptions{ContentType: ct}) // may already exist
		p, err := client.NewIdempotentProducer(s, "bench-producer", client.ProducerConfig{Linger: -1})
		if err != nil {
			return errResult("benchmark", err)
		}
		msg := payload(op.Size, ct)
		for range op.Count {
			if err := p.Append(msg); err != nil {
				return errResult("benchmark", err)
			}
		}
		if err := p.Close(ctx); err != nil {
			return errResult("benchmark", err)
		}
		metrics["bytesTransferred"] = op.Count * op.Size
		metrics["messagesProcessed"] = op.Count
	case "throughput_read":
		n, b := 0, 0
		for m, err := range s.Messages(ctx, client.ReadOptions{}) {
			if err != nil {
				return errResult("benchmark", err)
			}
			n++
			b += len(m)
		}
		metrics["bytesTransferred"] = b
		metrics["messagesProcessed"] = n
	default:
		return result{"type": "error", "success": false, "commandType": "benchmark", "errorCode": "NOT_SUPPORTED", "message": "unknown benchmark operation " + op.Op}
	}
	return result{"type": "benchmark", "success": true, "iterationId": c.IterationID,
		"durationNs": strconv.FormatInt(time.Since(start).Nanoseconds(), 10), "metrics": metrics}
}
