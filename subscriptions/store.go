package subscriptions

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// Store is the subscriptions of one stream store: the protocol's reserved subscription APIs as
// Go calls (docs/server.md#subscriptions), each one transaction of the store's writer. Package
// server maps them to HTTP; a [Delivery] runs the passes and webhook attempts they leave to do.
// It holds no state of its own beyond the stream store, so any number of Stores over one stream
// store (or over one shared database) agree. Its methods are safe for concurrent use.
type Store struct {
	ss  *stream.SubscriptionStore
	log *slog.Logger
}

// New returns the subscriptions of st.
func New(st *stream.Store) *Store {
	ss := st.Subscriptions()
	return &Store{ss: ss, log: ss.Logger()}
}

// Link is one stream link as reported.
type Link struct {
	// Path is the stream-root-relative stream path.
	Path string
	// LinkType is "explicit" when the stream was linked explicitly (it wins over a glob), else
	// "glob".
	LinkType string
	// Acked is the last processed position, inclusive (0: none).
	Acked int64
}

// Info is a subscription as reported by the read route.
type Info struct {
	// ID is the subscription's id.
	ID string
	// Config is its normalized configuration.
	Config Config
	// Created is when it was created.
	Created time.Time
	// Status is "active", or "failed" while a webhook retry is scheduled after a failed attempt.
	Status string
	// Links are its stream links, by path.
	Links []Link
	// Generation is the generation of the last wake issued (0: none yet).
	Generation int64
	// NextAttempt is when the failed webhook wake is sent again (zero unless Status is "failed").
	NextAttempt time.Time
}

// WakeStream is one stream of a wake, as sent to a webhook or returned by a claim.
type WakeStream struct {
	// Path is the stream-root-relative stream path; LinkType is "explicit" or "glob".
	Path, LinkType string
	// Acked is the link's acked position, Tail the stream's tail the wake snapshotted.
	Acked, Tail int64
	// HasPending reports Tail > Acked.
	HasPending bool
}

// Wake is a wake handed to a worker: by webhook (an attempt the delivery loop sends) or by a
// claim.
type Wake struct {
	// SubscriptionID, WakeID and Generation name the wake.
	SubscriptionID string
	WakeID         string
	Generation     int64
	// Token authenticates the wake's callback, ack and release calls.
	Token string
	// Streams are the wake's streams, as snapshotted.
	Streams []WakeStream
	// LeaseTTL is the subscription's lease duration.
	LeaseTTL time.Duration
	// URL is the webhook URL (webhook attempts).
	URL string
	// CallbackBase is the base of the callback URL (webhook attempts).
	CallbackBase string
	// Attempt counts the delivery attempts of this wake, this one included (webhook attempts).
	Attempt int
}

// Put creates subscription id with cfg (normalized here), or re-confirms it when it exists with
// the same configuration (created is false then). A different configuration under the id is a
// CONFLICT. Creation links the explicit streams and every existing stream the pattern matches at
// its current tail, so history is not replayed.
func (s *Store) Put(ctx context.Context, id string, cfg Config) (info Info, created bool, err error) {
	if id == "" || strings.Contains(id, "/") {
		return info, false, subErr(foldtype.CodeBadRequest, "subscription id %q: use a non-empty id without slashes", id)
	}
	cfg, err = Normalize(cfg)
	if err != nil {
		return info, false, err
	}
	hash := configHash(cfg)
	err = s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, ok, err := loadSub(x, id)
		if err != nil {
			return err
		}
		if ok {
			if subtle.ConstantTimeCompare([]byte(sub.St.Hash), []byte(hash)) != 1 {
				return subErr(foldtype.CodeConflict, "subscription %q exists with a different configuration; delete it first or use another id", id)
			}
			info, created = infoOfSub(sub), false
			return nil
		}
		sub = &subscription{ID: id, Cfg: cfg, St: subState{CreatedMs: x.Now().UnixMilli(), Hash: hash}}
		for _, p := range cfg.Streams {
			row, _, err := liveRow(x, p)
			if err != nil {
				return err
			}
			sub.addLink(p, true, row.ID, row.Tail) // zero values when missing
		}
		if cfg.Pattern != "" {
			if err := backfill(x, sub, true); err != nil {
				return err
			}
		}
		if err := saveSub(x, sub); err != nil {
			return err
		}
		info, created = infoOfSub(sub), true
		return nil
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return info, created, err
}

// Get returns subscription id, or SUBSCRIPTION_NOT_FOUND.
func (s *Store) Get(ctx context.Context, id string) (Info, error) {
	var info Info
	err := s.ss.View(ctx, func(q driver.SubscriptionReader) error {
		row, ok, err := q.Subscription(ctx, id)
		if err != nil {
			return err
		}
		if !ok {
			return subErr(foldtype.CodeSubscriptionNotFound, "no subscription %q", id)
		}
		row.ID = id
		sub, err := decodeRow(row)
		if err != nil {
			return err
		}
		info = infoOfSub(sub)
		return nil
	})
	return info, err
}

// Configs returns the configuration of every subscription by id.
func (s *Store) Configs(ctx context.Context) (map[string]Config, error) {
	out := make(map[string]Config)
	err := s.ss.View(ctx, func(q driver.SubscriptionReader) error {
		rows, err := q.Subscriptions(ctx)
		if err != nil {
			return err
		}
		for _, r := range rows {
			var c Config
			if err := json.Unmarshal(r.Config, &c); err != nil {
				return fmt.Errorf("subscription %q: corrupt configuration: %w", r.ID, err)
			}
			out[r.ID] = c
		}
		return nil
	})
	return out, err
}

// Delete deletes subscription id (no error when there is none). A callback, ack or release of
// one of its wakes fails afterwards, changing nothing.
func (s *Store) Delete(ctx context.Context, id string) error {
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		if err := x.Lock(id); err != nil {
			return err
		}
		return x.DeleteSubscription(id)
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return err
}

// AddStreams links the streams explicitly, each new one at its current tail; a stream already
// linked explicitly is left as it is.
func (s *Store) AddStreams(ctx context.Context, id string, paths []string) error {
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return err
		}
		if strings.Contains(p, "*") {
			return subErr(foldtype.CodeBadRequest, "explicit stream %q may not contain *", p)
		}
	}
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, err := mustSub(x, id)
		if err != nil {
			return err
		}
		for _, p := range paths {
			if p == sub.Cfg.WakeStream {
				return subErr(foldtype.CodeBadRequest, "stream %q is the subscription's own wake stream", p)
			}
			row, _, err := liveRow(x, p)
			if err != nil {
				return err
			}
			sub.addLink(p, true, row.ID, row.Tail)
		}
		return saveSub(x, sub)
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return err
}

// RemoveStream removes the explicit link of path; a glob link the pattern still makes stays.
// Removing an absent link is no error.
func (s *Store) RemoveStream(ctx context.Context, id, path string) error {
	return s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, err := mustSub(x, id)
		if err != nil {
			return err
		}
		l := sub.link(path)
		if l == nil || !l.Explicit {
			return nil
		}
		l.Explicit = false
		if !l.Glob {
			if sub.Cfg.Pattern != "" && matchGlob(sub.Cfg.Pattern, path) {
				l.Glob = true
			} else {
				sub.St.Links = slices.DeleteFunc(sub.St.Links, func(x subLink) bool { return x.Path == path })
			}
		}
		return saveSub(x, sub)
	})
}

// Claim gives the pull-wake subscription's current wake (issuing one first when none is in
// flight and work is pending) to worker, under a lease of the subscription's TTL. ok is false
// when there is nothing to claim. Another worker's live lease is ALREADY_CLAIMED, naming it.
func (s *Store) Claim(ctx context.Context, id, worker string) (w Wake, ok bool, err error) {
	if worker == "" {
		return w, false, subErr(foldtype.CodeBadRequest, "name the claiming worker in worker")
	}
	var issued bool
	err = s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, err := mustSub(x, id)
		if err != nil {
			return err
		}
		if sub.Cfg.Type != PullWake {
			return subErr(foldtype.CodeBadRequest, "subscription %q is a webhook subscription; only pull-wake subscriptions are claimed", id)
		}
		now := x.Now().UnixMilli()
		expireLease(sub, now)
		if sub.St.InFlight && sub.St.Holder != "" {
			return foldtype.NewError(foldtype.CodeAlreadyClaimed, map[string]any{"current_holder": sub.St.Holder, "generation": sub.St.Generation},
				"subscription %q is claimed by %q until its lease runs out", id, sub.St.Holder)
		}
		tails, err := refresh(x, sub, nil)
		if err != nil {
			return err
		}
		if issued, err = s.issueWake(x, sub, tails); err != nil {
			return err
		}
		ok = sub.St.InFlight
		if ok {
			sub.St.Holder = worker
			sub.St.LeaseUntilMs = now + sub.Cfg.LeaseTTLms
			sub.St.Snapshot = snapshotOf(sub, tails)
			if w, err = s.wakeOf(x, sub); err != nil {
				return err
			}
		}
		return saveSub(x, sub)
	})
	if err == nil && issued {
		s.ss.Notify(id)
	}
	return w, ok, err
}

// StreamAck acks one stream of a wake through position Offset (inclusive).
type StreamAck struct {
	// Stream is the stream-root-relative path of a linked stream.
	Stream string
	// Offset is the last position processed.
	Offset int64
}

// AckRequest is a callback (webhook) or ack (pull-wake) of a wake.
type AckRequest struct {
	// WakeID and Generation name the wake acked.
	WakeID     string
	Generation int64
	// Acks move links' acked offsets forward.
	Acks []StreamAck
	// Done finishes the wake; without it the call only extends the lease.
	Done bool
}

// Ack applies a webhook callback (callback true) or a pull-wake ack with token: the acks move
// the links' acked offsets forward; without Done the lease is extended, with Done the wake ends
// and, when work is still pending, the next wake is issued (nextWake). A wake that is not the
// current one, or whose lease ran out, is FENCED; a token that is not this wake's is
// UNAUTHORIZED.
func (s *Store) Ack(ctx context.Context, id, token string, callback bool, req AckRequest) (nextWake bool, err error) {
	err = s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		nextWake = false
		sub, err := fencedSub(x, id, token, callback, req.WakeID, req.Generation)
		if err != nil {
			return err
		}
		tails, err := refresh(x, sub, nil)
		if err != nil {
			return err
		}
		for _, a := range req.Acks {
			l := sub.link(a.Stream)
			if l == nil {
				return subErr(foldtype.CodeBadRequest, "stream %q is not linked to subscription %q", a.Stream, id)
			}
			if a.Offset < 0 || a.Offset > tails[a.Stream] {
				return subErr(foldtype.CodeBadRequest, "ack offset %d of %q is beyond the stream's tail %d", a.Offset, a.Stream, tails[a.Stream])
			}
			l.Acked = max(l.Acked, a.Offset)
		}
		if !req.Done {
			sub.St.LeaseUntilMs = x.Now().UnixMilli() + sub.Cfg.LeaseTTLms
			if callback {
				sub.St.NextAttemptMs, sub.St.Failed, sub.St.Sending = 0, false, false // the receiver has it
			}
			return saveSub(x, sub)
		}
		endWake(sub)
		if nextWake, err = s.issueWake(x, sub, tails); err != nil {
			return err
		}
		return saveSub(x, sub)
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return nextWake, err
}

// Release gives a claimed pull-wake wake back without acking; when work is still pending the
// next wake is issued (and its wake event written).
func (s *Store) Release(ctx context.Context, id, token, wakeID string, generation int64) error {
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, err := fencedSub(x, id, token, false, wakeID, generation)
		if err != nil {
			return err
		}
		if err := s.reissueWake(x, sub); err != nil {
			return err
		}
		return saveSub(x, sub)
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return err
}

// fencedSub loads the subscription a token-authenticated call names and checks the fence: the
// token is this wake's, and the wake is the current one with a live lease.
func fencedSub(x *stream.SubscriptionTx, id, token string, callback bool, wakeID string, generation int64) (*subscription, error) {
	sub, err := mustSub(x, id)
	if err != nil {
		return nil, err
	}
	if callback != (sub.Cfg.Type == Webhook) {
		if callback {
			return nil, subErr(foldtype.CodeBadRequest, "subscription %q is pull-wake: ack through /ack", id)
		}
		return nil, subErr(foldtype.CodeBadRequest, "subscription %q is a webhook subscription: ack through /callback", id)
	}
	okTok, err := checkWakeToken(x, token, id, generation, wakeID)
	if err != nil {
		return nil, err
	}
	if !okTok {
		return nil, subErr(foldtype.CodeUnauthorized, "the bearer token is not valid for this subscription's wake %q generation %d", wakeID, generation)
	}
	// A lease that ran out fences the call; its expiry itself is recorded by the delivery loop.
	expireLease(sub, x.Now().UnixMilli())
	if !sub.St.InFlight || sub.St.WakeID != wakeID || sub.St.Generation != generation || (!callback && sub.St.Holder == "") {
		return nil, subErr(foldtype.CodeFenced, "wake %q generation %d is not the subscription's current wake (or its lease ran out)", wakeID, generation)
	}
	return sub, nil
}

// StepResult is what one pass of the delivery loop over a subscription left to do.
type StepResult struct {
	// Attempt is a webhook delivery to send now (nil: none).
	Attempt *Wake
	// Next is when the subscription next needs a pass (a lease running out, a retry falling due);
	// zero for none.
	Next time.Time
	// Gone reports that there is no such subscription (deleted).
	Gone bool
	// Explicit is the stream paths the subscription links explicitly (POST …/streams), which its
	// pattern need not match: a commit on one of them makes it due.
	Explicit []string
}

// Step is one pass of the delivery loop: it ends a wake whose lease ran out, links the hint
// streams the pattern matches (streams that changed), issues a wake when work is pending, and
// starts a due webhook attempt (recording it before it is sent, so a node that dies mid-attempt
// leaves a retry behind). A missing subscription is no error (Gone).
func (s *Store) Step(ctx context.Context, id string, hints []string) (StepResult, error) {
	var step StepResult
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		step = StepResult{}
		sub, ok, err := loadSub(x, id)
		if err != nil {
			return err
		}
		if !ok {
			step.Gone = true
			return nil
		}
		before, _ := json.Marshal(sub.St)
		now := x.Now().UnixMilli()
		expireLease(sub, now)
		tails, err := refresh(x, sub, hints)
		if err != nil {
			return err
		}
		for _, l := range sub.St.Links {
			if l.Explicit {
				step.Explicit = append(step.Explicit, l.Path)
			}
		}
		if _, err := s.issueWake(x, sub, tails); err != nil {
			return err
		}
		if sub.Cfg.Type == Webhook && sub.St.InFlight && sub.St.NextAttemptMs != 0 && sub.St.NextAttemptMs <= now {
			sub.St.Attempts++
			sub.St.Sending = true
			sub.St.NextAttemptMs = now + AttemptGuard.Milliseconds()
			w, err := s.wakeOf(x, sub)
			if err != nil {
				return err
			}
			step.Attempt = &w
		}
		next := int64(0)
		for _, at := range []int64{sub.St.LeaseUntilMs, sub.St.NextAttemptMs} {
			if sub.St.InFlight && at != 0 && (next == 0 || at < next) {
				next = at
			}
		}
		if next != 0 {
			step.Next = time.UnixMilli(next)
		}
		if after, _ := json.Marshal(sub.St); string(after) == string(before) {
			return nil // a pass that changed nothing writes nothing
		}
		return saveSub(x, sub)
	})
	return step, err
}

// WebhookOutcome is how a webhook attempt ended.
type WebhookOutcome struct {
	// Accepted: the receiver answered 2xx.
	Accepted bool
	// Done: the receiver answered {"done": true}, finishing the wake synchronously.
	Done bool
}

// RecordAttempt records how the webhook attempt of wake (id, wakeID, generation) ended: a done
// answer acks the wake's snapshot and ends it (the next wake is issued when work is pending); an
// accepted one starts the lease the receiver's callbacks extend; a failure schedules the retry
// with backoff (RetryDelay) and marks the subscription failed. An attempt whose wake is no longer
// current changes nothing.
func (s *Store) RecordAttempt(ctx context.Context, id, wakeID string, generation int64, out WebhookOutcome) error {
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		sub, ok, err := loadSub(x, id)
		if err != nil || !ok {
			return err
		}
		if !sub.St.InFlight || sub.St.WakeID != wakeID || sub.St.Generation != generation || sub.St.NextAttemptMs == 0 {
			return nil // fenced: a callback (or another node) finished or moved the wake on
		}
		now := x.Now().UnixMilli()
		sub.St.Sending = false
		switch {
		case out.Accepted && out.Done:
			for _, sn := range sub.St.Snapshot {
				if l := sub.link(sn.Path); l != nil {
					l.Acked = max(l.Acked, sn.Tail)
				}
			}
			if err := s.reissueWake(x, sub); err != nil {
				return err
			}
		case out.Accepted:
			sub.St.NextAttemptMs, sub.St.Failed = 0, false
			sub.St.LeaseUntilMs = now + sub.Cfg.LeaseTTLms
		default:
			sub.St.Failed = true
			sub.St.NextAttemptMs = now + RetryDelay(sub.St.Attempts, mrand.Float64()).Milliseconds()
		}
		return saveSub(x, sub)
	})
	if err == nil {
		s.ss.Notify(id)
	}
	return err
}
