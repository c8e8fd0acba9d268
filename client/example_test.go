package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// exampleServer starts foldstream's server in process for the examples (in real code the URL is your
// server's).
func exampleServer() (string, func()) {
	u, stop, err := testserver.Serve(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	return u, stop
}

func Example() {
	base, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	s, err := client.NewStream(base+"/v1/stream/example-"+fmt.Sprint(time.Now().UnixNano()), client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		log.Fatal(err)
	}
	s.AppendJSON(ctx, map[string]any{"order": 1})
	s.AppendJSON(ctx, map[string]any{"order": 2})
	s.Close(ctx, nil)

	type order struct {
		Order int `json:"order"`
	}
	for o, err := range client.ReadJSON[order](ctx, s, client.ReadOptions{Live: client.LiveSSE}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("order", o.Order)
	}
	// Output:
	// order 1
	// order 2
}

func ExampleIdempotentProducer() {
	base, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	s, _ := client.NewStream(base+"/v1/stream/producer-"+fmt.Sprint(time.Now().UnixNano()), client.Config{})
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		log.Fatal(err)
	}
	// Each run of the process starts a fresh session of the stable producer id (an epoch above
	// the earlier runs'), so a restart neither loses nor repeats data.
	p, err := client.NewIdempotentProducer(s, "order-service-1", client.ProducerConfig{})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 1000 {
		if err := p.AppendJSON(map[string]int{"n": i}); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil { // flushes; reports the first delivery error
		log.Fatal(err)
	}
	n := 0
	for _, err := range s.Messages(ctx, client.ReadOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "messages, fresh epoch:", p.Epoch() > 0)
	// Output: 1000 messages, fresh epoch: true
}

func ExampleStream_Read() {
	base, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s, _ := client.NewStream(base+"/v1/stream/read-"+fmt.Sprint(time.Now().UnixNano()), client.Config{})
	s.Create(ctx, client.CreateOptions{ContentType: "text/plain", Data: []byte("hello ")})
	// A live read waits for what comes next and ends when the stream is closed. (Here the loop
	// itself writes, after each chunk, so the chunks are the same on every run.)
	for c, err := range s.Read(ctx, client.ReadOptions{Live: client.LiveLongPoll}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q closed=%v\n", c.Data, c.Closed)
		switch string(c.Data) {
		case "hello ":
			s.Append(ctx, []byte("world"))
		case "world":
			s.Close(ctx, nil)
		}
		if c.Closed {
			break
		}
	}
	// Output:
	// "hello " closed=false
	// "world" closed=false
	// "" closed=true
}

func ExampleStreamClosedError() {
	base, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	s, _ := client.NewStream(base+"/v1/stream/closed-"+fmt.Sprint(time.Now().UnixNano()), client.Config{})
	s.Create(ctx, client.CreateOptions{ContentType: "text/plain", Closed: true})
	_, err := s.Append(ctx, []byte("too late"))
	var closed *client.StreamClosedError
	fmt.Println(errors.As(err, &closed), errors.Is(err, client.ErrStreamClosed), closed.FinalOffset != "")
	// Output: true true true
}

func ExampleSubscriptions_RunWorker() {
	base, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wake, _ := client.NewStream(base+"/v1/stream/wake", client.Config{})
	if _, err := wake.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		log.Fatal(err)
	}
	subs, _ := client.NewSubscriptions(base+"/v1/stream/", client.Config{})
	if _, _, err := subs.Create(ctx, "jobs", client.SubscriptionSpec{Type: "pull-wake", Pattern: "jobs/*", WakeStream: "wake"}); err != nil {
		log.Fatal(err)
	}
	job, _ := client.NewStream(base+"/v1/stream/jobs/1", client.Config{})
	if _, err := job.Create(ctx, client.CreateOptions{ContentType: "application/json", Data: []byte(`{"task":"resize"}`)}); err != nil {
		log.Fatal(err)
	}
	err := subs.RunWorker(ctx, client.WorkerConfig{Subscription: "jobs", Worker: "worker-1",
		Handle: func(_ context.Context, w *client.Wake) error {
			for _, s := range w.Streams {
				fmt.Println("woken for", s.Path, "up to", s.TailOffset)
			}
			cancel() // one wake is enough for the example
			return nil
		}})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// woken for jobs/1 up to 0000000000000000_0000000000000001
	// true
}
