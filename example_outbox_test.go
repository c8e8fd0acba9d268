package foldstream_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

type outboxState struct {
	Orders int `json:"orders"`
}

// mailOutbox writes, for every placed order, an outbox event "mail.requested" carrying the
// effect's key (docs/effects.md#an-outbox): the event commits once, with the processor's unit.
type mailOutbox struct{ foldstream.Base[outboxState] }

func (mailOutbox) Reduce(a foldstream.ReduceArgs[outboxState]) (outboxState, bool, error) {
	if a.Event.Type != "order.placed" {
		return a.State, false, nil
	}
	return outboxState{Orders: a.State.Orders + 1}, true, nil
}

func (m mailOutbox) ProcessEvent(a *foldstream.ProcessEventArgs[outboxState]) error {
	if a.Event == nil || a.Event.Type != "order.placed" {
		return nil
	}
	ev := a.Event
	a.BlockProcessorWhile(func(ctx context.Context) error {
		_, err := a.Append(ctx, foldstream.EventInput{
			Type:           "mail.requested",
			Payload:        foldstream.JSON(map[string]any{"order": json.RawMessage(ev.Payload), "key": m.EffectKey("mail", ev)}),
			IdempotencyKey: m.IdempotencyKey("mail", ev),
		})
		return err
	})
	return nil
}

// mailProvider stands in for a mail service that dedupes by idempotency key, as payment and mail
// providers do.
type mailProvider struct{ sent map[string]bool }

func (p *mailProvider) send(key string) (duplicate bool) {
	if p.sent[key] {
		return true
	}
	p.sent[key] = true
	return false
}

// An outbox: the processor records each effect as an event in its own stream (exactly once, with
// its unit), and a relay reads those events and calls the service with the effect's key. The
// relay runs at least once (here twice, as after a crash between the call and its record), and the
// service's dedupe by key makes the effect happen once.
func Example_outbox() {
	ctx := context.Background()
	contract := foldstream.MustDefineContract(foldstream.ContractConfig[outboxState]{
		Slug: "mailer", Version: "1", Consumes: []string{"order.placed"}, Emits: []string{"mail.requested"},
	})
	mem := testsupport.NewMemoryStream()
	eng, err := foldstream.NewEngine[outboxState](mailOutbox{foldstream.NewBase(contract)},
		foldstream.EngineConfig{Stream: mem, Checkpoints: testsupport.MemoryCheckpoints()})
	if err != nil {
		panic(err)
	}
	mem.Register(eng)
	for _, order := range []string{"o1", "o2"} {
		if _, err := mem.Append(ctx, foldstream.EventInput{Type: "order.placed", Payload: foldstream.JSON(map[string]string{"id": order})}); err != nil {
			panic(err)
		}
	}
	_ = mem.WaitIdle(ctx)

	provider := &mailProvider{sent: map[string]bool{}}
	relay := func() (sent, duplicates int) {
		for _, ev := range mem.EventsOfType("mail.requested") {
			var req struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(ev.Payload, &req); err != nil || req.Key == "" {
				panic(fmt.Sprint("outbox event without a key: ", err))
			}
			if provider.send(req.Key) {
				duplicates++
			} else {
				sent++
			}
		}
		return sent, duplicates
	}
	s, d := relay()
	fmt.Printf("first relay: %d sent, %d deduplicated\n", s, d)
	s, d = relay() // the relay ran again: at least once
	fmt.Printf("second relay: %d sent, %d deduplicated\n", s, d)
	fmt.Println("mails the provider delivered:", len(provider.sent))
	// Output:
	// first relay: 2 sent, 0 deduplicated
	// second relay: 0 sent, 2 deduplicated
	// mails the provider delivered: 2
}
