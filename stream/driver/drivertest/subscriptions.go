package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/subscriptions"
)

// RunSubscriptionDriver checks the driver's subscription rows and signing keys.
func RunSubscriptionDriver(t *testing.T, newDriver Factory) {
	ctx := context.Background()

	t.Run("SubscriptionRowsPutReplaceDelete", func(t *testing.T) {
		h := open(t, newDriver)
		h.write(func(tx driver.Tx) error {
			if err := tx.LockSubscription(ctx, "b"); err != nil {
				return err
			}
			for _, id := range []string{"b", "a"} {
				if err := tx.PutSubscription(ctx, driver.SubscriptionRow{ID: id, Config: []byte(`{"type":"webhook"}`), State: []byte(`{"g":1}`)}); err != nil {
					return err
				}
			}
			return tx.PutSubscription(ctx, driver.SubscriptionRow{ID: "b", Config: []byte(`{"type":"pull-wake"}`), State: []byte(`{"g":2}`)})
		})
		h.read(func(q driver.Reader) error {
			r, ok, err := q.Subscription(ctx, "b")
			if err != nil || !ok || string(r.Config) != `{"type":"pull-wake"}` || string(r.State) != `{"g":2}` {
				t.Errorf("replaced row: got %+v %v %v", r, ok, err)
			}
			if _, ok, err := q.Subscription(ctx, "missing"); ok || err != nil {
				t.Errorf("missing row: got %v %v, want not found", ok, err)
			}
			all, err := q.Subscriptions(ctx)
			if err != nil || len(all) != 2 || all[0].ID != "a" || all[1].ID != "b" {
				t.Errorf("all rows: got %+v %v, want a then b", all, err)
			}
			return nil
		})
		h.write(func(tx driver.Tx) error {
			if err := tx.DeleteSubscription(ctx, "a"); err != nil {
				return err
			}
			return tx.DeleteSubscription(ctx, "never-there")
		})
		h.read(func(q driver.Reader) error {
			if _, ok, err := q.Subscription(ctx, "a"); ok || err != nil {
				t.Errorf("deleted row: got %v %v", ok, err)
			}
			return nil
		})
	})

	t.Run("SigningKeysKeepSeedAndRetire", func(t *testing.T) {
		h := open(t, newDriver)
		seed := bytes.Repeat([]byte{7}, 32)
		h.write(func(tx driver.Tx) error {
			if err := tx.PutSigningKey(ctx, driver.SigningKey{KID: "k2", CreatedMs: 20, Seed: bytes.Repeat([]byte{9}, 32)}); err != nil {
				return err
			}
			return tx.PutSigningKey(ctx, driver.SigningKey{KID: "k1", CreatedMs: 10, Seed: seed})
		})
		h.write(func(tx driver.Tx) error {
			// A later put only retires: the seed of a key never changes.
			return tx.PutSigningKey(ctx, driver.SigningKey{KID: "k1", CreatedMs: 10, Seed: bytes.Repeat([]byte{1}, 32), RetiredMs: 30})
		})
		h.read(func(q driver.Reader) error {
			keys, err := q.SigningKeys(ctx)
			if err != nil || len(keys) != 2 || keys[0].KID != "k1" || keys[1].KID != "k2" {
				t.Fatalf("keys: got %+v %v, want k1 then k2", keys, err)
			}
			if !bytes.Equal(keys[0].Seed, seed) || keys[0].RetiredMs != 30 || keys[1].RetiredMs != 0 {
				t.Errorf("k1: got %+v, want its first seed, retired at 30", keys[0])
			}
			return nil
		})
	})
}

// RunSubscriptionStore runs package subscriptions' rules over the driver, through the store's
// subscription face.
func RunSubscriptionStore(t *testing.T, newDriver Factory) {
	ctx := context.Background()
	create := func(t *testing.T, s *stream.Store, path string) {
		t.Helper()
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: path, ContentType: "application/json"}); err != nil {
			t.Fatalf("create %s: %v", path, err)
		}
	}
	appendTo := func(t *testing.T, s *stream.Store, path, body string) int64 {
		t.Helper()
		r, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: path, ContentType: "application/json", Body: []byte(body)})
		if err != nil {
			t.Fatalf("append %s: %v", path, err)
		}
		return r.Tail
	}

	t.Run("SubscriptionBackfillsAtTailAndReconfirms", func(t *testing.T) {
		s := openStore(t, newDriver)
		create(t, s, "/events/old")
		appendTo(t, s, "/events/old", `[{"n":1},{"n":2}]`)
		cfg := subscriptions.Config{Type: subscriptions.PullWake, Pattern: "events/*", Streams: []string{"manual/x", "manual/x"}, WakeStream: "wake"}
		info, created, err := subscriptions.New(s).Put(ctx, "s1", cfg)
		if err != nil || !created {
			t.Fatalf("create: got %v %v", created, err)
		}
		want := []subscriptions.Link{{Path: "events/old", LinkType: "glob", Acked: 2}, {Path: "manual/x", LinkType: "explicit", Acked: 0}}
		if len(info.Links) != 2 || info.Links[0] != want[0] || info.Links[1] != want[1] {
			t.Errorf("links: got %+v, want %+v", info.Links, want)
		}
		if _, created, err := subscriptions.New(s).Put(ctx, "s1", cfg); err != nil || created {
			t.Errorf("re-confirm: got created=%v %v, want an idempotent 200", created, err)
		}
		cfg.LeaseTTLms = 5000
		if _, _, err := subscriptions.New(s).Put(ctx, "s1", cfg); !errors.Is(err, foldtype.ErrConflict) {
			t.Errorf("different configuration: got %v, want CONFLICT", err)
		}
	})

	t.Run("PullWakeClaimAckFencesAndWritesWakeEvents", func(t *testing.T) {
		s := openStore(t, newDriver)
		create(t, s, "/wake")
		if _, _, err := subscriptions.New(s).Put(ctx, "p", subscriptions.Config{Type: subscriptions.PullWake, Pattern: "events/*", WakeStream: "wake", LeaseTTLms: 1000}); err != nil {
			t.Fatal(err)
		}
		create(t, s, "/events/a")
		tail := appendTo(t, s, "/events/a", `{"n":1}`)
		step, err := subscriptions.New(s).Step(ctx, "p", []string{"events/a"})
		if err != nil || step.Attempt != nil {
			t.Fatalf("step: got %+v %v, want a pull-wake wake issued (no webhook attempt)", step, err)
		}
		// The wake event is in the wake stream, committed with the wake.
		r, err := s.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: "/wake", MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var evs []map[string]any
		if err := json.Unmarshal(r.Body, &evs); err != nil || len(evs) != 1 || evs[0]["type"] != "wake" ||
			evs[0]["subscription_id"] != "p" || evs[0]["stream"] != "events/a" || evs[0]["generation"] != float64(1) {
			t.Fatalf("wake events: got %s %v", r.Body, err)
		}
		w, ok, err := subscriptions.New(s).Claim(ctx, "p", "worker-1")
		if err != nil || !ok || w.Generation != 1 || len(w.Streams) != 1 || w.Streams[0].Tail != tail || !w.Streams[0].HasPending {
			t.Fatalf("claim: got %+v %v %v", w, ok, err)
		}
		_, _, err = subscriptions.New(s).Claim(ctx, "p", "worker-2")
		var fe *foldtype.Error
		if !errors.As(err, &fe) || fe.Code != foldtype.CodeAlreadyClaimed || fe.Data["current_holder"] != "worker-1" {
			t.Fatalf("second claim: got %v, want ALREADY_CLAIMED naming worker-1", err)
		}
		ack := subscriptions.AckRequest{WakeID: w.WakeID, Generation: w.Generation, Acks: []subscriptions.StreamAck{{Stream: "events/a", Offset: tail}}, Done: true}
		if _, err := subscriptions.New(s).Ack(ctx, "p", w.Token+"x", false, ack); !errors.Is(err, &foldtype.Error{Code: foldtype.CodeUnauthorized}) {
			t.Errorf("forged token: got %v, want UNAUTHORIZED", err)
		}
		next, err := subscriptions.New(s).Ack(ctx, "p", w.Token, false, ack)
		if err != nil || next {
			t.Fatalf("ack: got next=%v %v, want done with no next wake", next, err)
		}
		if _, err := subscriptions.New(s).Ack(ctx, "p", w.Token, false, ack); !errors.Is(err, &foldtype.Error{Code: foldtype.CodeFenced}) {
			t.Errorf("stale ack: got %v, want FENCED", err)
		}
		info, err := subscriptions.New(s).Get(ctx, "p")
		if err != nil || len(info.Links) != 1 || info.Links[0].Acked != tail {
			t.Errorf("after ack: got %+v %v, want events/a acked at %d", info.Links, err, tail)
		}
		if _, ok, err := subscriptions.New(s).Claim(ctx, "p", "worker-1"); ok || err != nil {
			t.Errorf("claim with nothing pending: got %v %v, want nothing to claim", ok, err)
		}
	})

	t.Run("DeletedSubscriptionRefusesItsWakes", func(t *testing.T) {
		s := openStore(t, newDriver)
		create(t, s, "/wake")
		if _, _, err := subscriptions.New(s).Put(ctx, "d", subscriptions.Config{Type: subscriptions.PullWake, Streams: []string{"x"}, WakeStream: "wake"}); err != nil {
			t.Fatal(err)
		}
		create(t, s, "/x")
		appendTo(t, s, "/x", `{"n":1}`)
		w, ok, err := subscriptions.New(s).Claim(ctx, "d", "w")
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if err := subscriptions.New(s).Delete(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		_, err = subscriptions.New(s).Ack(ctx, "d", w.Token, false, subscriptions.AckRequest{WakeID: w.WakeID, Generation: w.Generation, Done: true})
		if !errors.Is(err, &foldtype.Error{Code: foldtype.CodeSubscriptionNotFound}) {
			t.Errorf("ack after delete: got %v, want SUBSCRIPTION_NOT_FOUND", err)
		}
	})

	t.Run("WebhookKeysPersistAndRotate", func(t *testing.T) {
		d := newDriver(t)
		s, err := stream.OpenDriver(ctx, d, stream.Config{ProducerReorderWait: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		k1, err := subscriptions.New(s).WebhookKeys(ctx)
		if err != nil || len(k1) != 1 {
			t.Fatalf("first keys: %+v %v", k1, err)
		}
		again, err := subscriptions.New(s).WebhookKeys(ctx)
		if err != nil || len(again) != 1 || again[0].KID != k1[0].KID || !again[0].Private.Equal(k1[0].Private) {
			t.Fatalf("keys read again: got %+v %v, want the same key", again, err)
		}
		rot, err := subscriptions.New(s).RotateWebhookKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := subscriptions.New(s).WebhookKeys(ctx)
		if err != nil || len(keys) != 2 || keys[0].KID != k1[0].KID || keys[0].Retired.IsZero() || keys[1].KID != rot.KID || !keys[1].Retired.IsZero() {
			t.Fatalf("after rotation: got %+v %v, want the old key retired first, the new one active last", keys, err)
		}
	})
}
