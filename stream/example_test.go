package stream_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// Append events to a stream and read them back.
func ExampleEventStream_Append() {
	ctx := context.Background()
	s, err := storeopen.Open(ctx, ":memory:", storeopen.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	got, err := s.Events().Stream("/orders").Append(ctx, foldtype.EventInput{Type: "order-placed", Payload: foldtype.JSON(map[string]any{"id": 7}), IdempotencyKey: "order-7"}, foldtype.EventInput{Type: "typing", Ephemeral: true}, foldtype.EventInput{Type: "order-paid", Payload: foldtype.JSON(map[string]any{"id": 7})})
	if err != nil {
		panic(err)
	}
	for _, e := range got {
		fmt.Println(e.Offset, e.Type, e.Ephemeral)
	}
	// A retry with the same key and body echoes the stored event.
	again, _ := s.Events().Stream("/orders").Append(ctx, foldtype.EventInput{Type: "order-placed", Payload: foldtype.JSON(map[string]any{"id": 7}), IdempotencyKey: "order-7"})
	fmt.Println("retry landed at", again[0].Offset)

	page, err := s.Events().Stream("/orders").Read(ctx, 0, 100)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(page.Events), "durable events, proven through", page.ScannedThroughOffset, "at head:", page.AtHead)
	// Output:
	// 1 order-placed false
	// 2 typing true
	// 3 order-paid false
	// retry landed at 1
	// 2 durable events, proven through 3 at head: true
}

// Subscribe to a stream's commits: pushes carry the consumed events and a range that chains to the
// previous push.
func ExampleEvents_Subscribe() {
	ctx := context.Background()
	s, err := storeopen.Open(ctx, ":memory:", storeopen.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	var mu sync.Mutex
	var lines []string
	sub, err := s.Events().Subscribe("/chat", func(ctx context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			lines = append(lines, fmt.Sprintf("(%d,%d] %s@%d", r.After, r.Through, e.Type, e.Offset))
		}
		return nil
	}, stream.SubscribeOptions{Consumes: []string{"message-sent"}})
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	for _, typ := range []string{"message-sent", "user-joined", "message-sent"} { // user-joined is not consumed: its span rides in the next range
		if _, err := s.Events().Stream("/chat").Append(ctx, foldtype.EventInput{Type: typ}); err != nil {
			panic(err)
		}
		// Wait for the push, so that this example shows one push per commit; pushes queued while
		// one is in flight are folded into one.
		if err := sub.WaitDelivered(ctx); err != nil {
			panic(err)
		}
	}
	mu.Lock()
	for _, l := range lines {
		fmt.Println(l)
	}
	mu.Unlock()
	// Output:
	// (0,1] message-sent@1
	// (1,3] message-sent@3
}

// Open a store on a SQLite file without linking the PostgreSQL driver: open the driver, then the
// store over it (storeopen.Open does the same for a path, and also takes postgres:// URLs).
func ExampleOpenDriver() {
	ctx := context.Background()
	d, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: ":memory:"}) // or a file path
	if err != nil {
		panic(err)
	}
	s, err := stream.OpenDriver(ctx, d, stream.Config{})
	if err != nil {
		d.Close() // the store did not take the driver
		panic(err)
	}
	defer s.Close(context.Background()) // closes the driver and releases the file's lock

	evs, err := s.Events().Stream("/greetings").Append(ctx, foldtype.EventInput{Type: "hello"})
	if err != nil {
		panic(err)
	}
	fmt.Println(evs[0].Offset, evs[0].Type)
	// Output:
	// 1 hello
}
