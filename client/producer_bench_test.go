package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/refserver"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// BenchmarkProducer measures the producer's throughput for 200-byte JSON messages with default
// options; b.N is the number of messages. bench/producer compares it with the TypeScript producer.
func BenchmarkProducer(b *testing.B) {
	b.Run("foldstream", func(b *testing.B) { benchmarkProducer(b, testserver.Start(b)) })
	b.Run("reference", func(b *testing.B) { benchmarkProducer(b, refserver.Start(b)) })
}

func benchmarkProducer(b *testing.B, base string) {
	ctx := context.Background()
	s, _ := client.NewStream(fmt.Sprintf("%s/v1/stream/bench-%d", base, time.Now().UnixNano()), client.Config{})
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		b.Fatal(err)
	}
	msg := []byte(`{"id":1,"pad":"` + strings.Repeat("x", 200-len(`{"id":1,"pad":""}`)) + `"}`)
	p, err := client.NewIdempotentProducer(s, "bench", client.ProducerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := p.Append(msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
