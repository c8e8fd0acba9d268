package subscriptions

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// The state machine of one subscription. A subscription is one row (driver.SubscriptionRow): its
// normalized configuration, and its state — one link per stream with the last acked offset, the
// wake in flight (generation, wake id, the tails it snapshotted), the worker lease, the webhook
// retry schedule. Every change is one write function of the store's writer
// (stream.SubscriptionStore.Update) that locks the row, reads it, decides here, and writes it
// back, so two requests (or two nodes) never interleave on one subscription, and a wake event a
// pull-wake subscription writes to its wake stream commits with the state that issued it.
//
// Paths here are stream-root-relative ("events/abc"); the store path is "/" + that.

// subLink is one stream link of a subscription.
type subLink struct {
	Path     string `json:"path"`
	Explicit bool   `json:"explicit,omitempty"`
	Glob     bool   `json:"glob,omitempty"`
	// StreamID is the identity of the stream the link follows (0: none yet); a stream deleted
	// and created again at the path gets a new one, and its link starts again from 0.
	StreamID int64 `json:"stream_id,omitempty"`
	Acked    int64 `json:"acked"`
}

// subState is a subscription's mutable state.
type subState struct {
	CreatedMs  int64     `json:"created_ms"`
	Hash       string    `json:"hash"`
	Links      []subLink `json:"links"`
	Generation int64     `json:"generation"`
	WakeID     string    `json:"wake_id,omitempty"`
	// InFlight: the wake WakeID is issued and not finished (acked done, released or expired).
	InFlight bool `json:"in_flight,omitempty"`
	// Snapshot holds the tails the wake was issued (webhook) or claimed (pull-wake) with.
	Snapshot []snapLink `json:"snapshot,omitempty"`
	// Holder is the pull-wake worker holding the lease ("" when none).
	Holder string `json:"holder,omitempty"`
	// LeaseUntilMs is when the lease runs out (0: no lease running).
	LeaseUntilMs int64 `json:"lease_until_ms,omitempty"`
	// Webhook delivery: the attempt number of the last attempt started, and when the next one
	// is due (0: nothing to send — delivered, or no wake).
	Attempts      int   `json:"attempts,omitempty"`
	NextAttemptMs int64 `json:"next_attempt_ms,omitempty"`
	// Failed is set while a retry is scheduled after a failed attempt.
	Failed bool `json:"failed,omitempty"`
	// Sending is set while an attempt is out (NextAttemptMs is then its guard time).
	Sending bool `json:"sending,omitempty"`
}

type snapLink struct {
	Path string `json:"path"`
	Tail int64  `json:"tail"`
}

// subscription is a loaded row.
type subscription struct {
	ID  string
	Cfg Config
	St  subState
}

func (sub *subscription) link(path string) *subLink {
	i, ok := slices.BinarySearchFunc(sub.St.Links, path, func(l subLink, p string) int { return strings.Compare(l.Path, p) })
	if !ok {
		return nil
	}
	return &sub.St.Links[i]
}

// addLink adds (or marks) the link of path, at acked when new.
func (sub *subscription) addLink(path string, explicit bool, streamID, acked int64) {
	if l := sub.link(path); l != nil {
		if explicit {
			l.Explicit = true
		} else {
			l.Glob = true
		}
		return
	}
	l := subLink{Path: path, Explicit: explicit, Glob: !explicit, StreamID: streamID, Acked: acked}
	i, _ := slices.BinarySearchFunc(sub.St.Links, path, func(l subLink, p string) int { return strings.Compare(l.Path, p) })
	sub.St.Links = slices.Insert(sub.St.Links, i, l)
}

// decodeRow reads a stored row.
func decodeRow(row driver.SubscriptionRow) (*subscription, error) {
	sub := &subscription{ID: row.ID}
	if err := json.Unmarshal(row.Config, &sub.Cfg); err != nil {
		return nil, fmt.Errorf("subscription %q: corrupt configuration: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.State, &sub.St); err != nil {
		return nil, fmt.Errorf("subscription %q: corrupt state: %w", row.ID, err)
	}
	return sub, nil
}

// loadSub locks and reads subscription id inside x. found is false when there is none.
func loadSub(x *stream.SubscriptionTx, id string) (*subscription, bool, error) {
	if err := x.Lock(id); err != nil {
		return nil, false, err
	}
	row, ok, err := x.Subscription(id)
	if err != nil || !ok {
		return nil, false, err
	}
	row.ID = id
	sub, err := decodeRow(row)
	return sub, err == nil, err
}

func mustSub(x *stream.SubscriptionTx, id string) (*subscription, error) {
	sub, ok, err := loadSub(x, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, subErr(foldtype.CodeSubscriptionNotFound, "no subscription %q; create it with PUT first", id)
	}
	return sub, nil
}

func saveSub(x *stream.SubscriptionTx, sub *subscription) error {
	cfg, err := json.Marshal(sub.Cfg)
	if err != nil {
		return err
	}
	st, err := json.Marshal(sub.St)
	if err != nil {
		return err
	}
	return x.PutSubscription(driver.SubscriptionRow{ID: sub.ID, Config: cfg, State: st})
}

// liveRow returns the live stream at the stream-root-relative path, or ok=false.
func liveRow(x *stream.SubscriptionTx, path string) (stream.StreamRef, bool, error) {
	return x.LiveStream("/" + path)
}

// refresh brings the links up to date with the store: a stream deleted drops its glob link (an
// explicit link stays, at 0); a stream created again at a linked path starts again from 0; each
// hint path the pattern matches and no link has yet is linked from 0 (it was created after the
// subscription: backfill linked every earlier one). It returns the current tail of each link.
func refresh(x *stream.SubscriptionTx, sub *subscription, hints []string) (map[string]int64, error) {
	for _, p := range hints {
		if p != sub.Cfg.WakeStream && sub.Cfg.Pattern != "" && matchGlob(sub.Cfg.Pattern, p) && sub.link(p) == nil {
			sub.addLink(p, false, 0, 0)
		}
	}
	if sub.Cfg.Pattern != "" {
		// Streams the pattern matches that no link has yet were created after the subscription
		// (creation linked every earlier one): linked from their start.
		if err := backfill(x, sub, false); err != nil {
			return nil, err
		}
	}
	tails := make(map[string]int64, len(sub.St.Links))
	keep := sub.St.Links[:0]
	for _, l := range sub.St.Links {
		row, ok, err := liveRow(x, l.Path)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok && !l.Explicit:
			continue // the stream is gone: so is its glob link
		case !ok:
			l.StreamID, l.Acked = 0, 0
		case row.ID != l.StreamID:
			l.StreamID, l.Acked = row.ID, 0
		}
		if ok {
			tails[l.Path] = row.Tail
		}
		keep = append(keep, l)
	}
	sub.St.Links = keep
	return tails, nil
}

// backfill links every stream the pattern matches and no link has yet: at its current tail
// (atTail, at creation) or from its start.
func backfill(x *stream.SubscriptionTx, sub *subscription, atTail bool) error {
	prefix := globPrefix(sub.Cfg.Pattern)
	const page = 1000
	after := ""
	for {
		rows, err := x.StreamsUnder(prefix, after, page)
		if err != nil {
			return err
		}
		for _, r := range rows {
			p := strings.TrimPrefix(r.Path, "/")
			if p == sub.Cfg.WakeStream || !matchGlob(sub.Cfg.Pattern, p) {
				continue
			}
			if l := sub.link(p); l != nil {
				l.Glob = true
				continue
			}
			acked := int64(0)
			if atTail {
				acked = r.Tail
			}
			sub.addLink(p, false, r.ID, acked)
		}
		if len(rows) < page {
			return nil
		}
		after = rows[len(rows)-1].Path
	}
}

func (sub *subscription) pending(tails map[string]int64) bool {
	for _, l := range sub.St.Links {
		if tails[l.Path] > l.Acked {
			return true
		}
	}
	return false
}

func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// issueWake starts a new wake when none is in flight and a link has pending work: the next
// generation, a new wake id, the tails snapshotted. A webhook wake is due for delivery at once; a
// pull-wake wake appends one wake event per pending stream to the wake stream, in this same
// transaction. It reports whether it issued one.
func (s *Store) issueWake(x *stream.SubscriptionTx, sub *subscription, tails map[string]int64) (bool, error) {
	if sub.St.InFlight || !sub.pending(tails) {
		return false, nil
	}
	now := x.Now().UnixMilli()
	sub.St.Generation++
	sub.St.WakeID = randomID("w_")
	sub.St.InFlight = true
	sub.St.Holder, sub.St.LeaseUntilMs = "", 0
	sub.St.Snapshot = snapshotOf(sub, tails)
	if sub.Cfg.Type == Webhook {
		sub.St.Attempts, sub.St.NextAttemptMs, sub.St.Failed = 0, now, false
		return true, nil
	}
	var msgs [][]byte
	for _, l := range sub.St.Links {
		if tails[l.Path] <= l.Acked {
			continue
		}
		ev, _ := json.Marshal(map[string]any{"type": "wake", "subscription_id": sub.ID, "stream": l.Path,
			"generation": sub.St.Generation, "ts": now})
		msgs = append(msgs, ev)
	}
	body := append(append([]byte("["), joinJSON(msgs)...), ']')
	// Locks the wake stream (shared databases) before anything of this function is written.
	if err := x.LockJSONStream("/" + sub.Cfg.WakeStream); err != nil {
		if !wakeStreamUnusable(err) {
			// The database did not answer (or failed otherwise): the pass fails and is retried,
			// rather than issue a wake nobody is told of.
			return false, fmt.Errorf("subscription %q: take the wake stream %q: %w", sub.ID, sub.Cfg.WakeStream, err)
		}
		// No wake stream to write to (missing, closed, not JSON): the wake is still issued, and
		// a worker can claim it; the application has to create the wake stream to be told.
		s.log.Warn("subscription: cannot write a wake event to the wake stream", "subscription", sub.ID,
			"wake_stream", sub.Cfg.WakeStream, "err", err)
		return true, nil
	}
	if err := x.AppendJSON("/"+sub.Cfg.WakeStream, body); err != nil {
		var fe *foldtype.Error
		if errors.As(err, &fe) {
			// A refusal of the append itself (a paused wake stream, say), decided before it wrote
			// anything: the wake stands, claimable, as for a missing wake stream.
			s.log.Warn("subscription: the wake stream refused a wake event", "subscription", sub.ID,
				"wake_stream", sub.Cfg.WakeStream, "err", err)
			return true, nil
		}
		return false, fmt.Errorf("subscription %q: write a wake event to %q: %w", sub.ID, sub.Cfg.WakeStream, err)
	}
	return true, nil
}

// wakeStreamUnusable reports whether err, from taking a pull-wake subscription's wake stream,
// says the stream cannot take wake events (missing, deleted, closed, not JSON) rather than that
// the database failed.
func wakeStreamUnusable(err error) bool {
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		return false
	}
	switch fe.Code {
	case foldtype.CodeStreamNotFound, foldtype.CodeStreamGone, foldtype.CodeStreamDeleted, foldtype.CodeStreamClosed, foldtype.CodeConflict:
		return true
	}
	return false
}

func joinJSON(msgs [][]byte) []byte {
	var out []byte
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return out
}

func snapshotOf(sub *subscription, tails map[string]int64) []snapLink {
	out := make([]snapLink, 0, len(sub.St.Links))
	for _, l := range sub.St.Links {
		out = append(out, snapLink{Path: l.Path, Tail: max(tails[l.Path], l.Acked)})
	}
	return out
}

// endWake finishes the wake in flight (done, released, expired, fenced by a delete).
func endWake(sub *subscription) {
	sub.St.InFlight = false
	sub.St.Holder, sub.St.LeaseUntilMs = "", 0
	sub.St.NextAttemptMs, sub.St.Attempts, sub.St.Failed, sub.St.Sending = 0, 0, false, false
	sub.St.Snapshot = nil
}

// reissueWake ends sub's current wake and issues the next one (with its wake event) when work
// is still pending on its streams' tails as of now.
func (s *Store) reissueWake(x *stream.SubscriptionTx, sub *subscription) error {
	tails, err := refresh(x, sub, nil)
	if err != nil {
		return err
	}
	endWake(sub)
	_, err = s.issueWake(x, sub, tails)
	return err
}

// expireLease ends a wake whose lease ran out by now.
func expireLease(sub *subscription, nowMs int64) bool {
	if sub.St.InFlight && sub.St.LeaseUntilMs != 0 && sub.St.LeaseUntilMs <= nowMs {
		endWake(sub)
		return true
	}
	return false
}

func linkType(l subLink) string {
	if l.Explicit {
		return "explicit"
	}
	return "glob"
}

func infoOfSub(sub *subscription) Info {
	in := Info{ID: sub.ID, Config: sub.Cfg, Created: time.UnixMilli(sub.St.CreatedMs).UTC(), Status: "active",
		Generation: sub.St.Generation}
	if sub.St.Failed {
		in.Status = "failed"
		if sub.St.NextAttemptMs != 0 && !sub.St.Sending {
			in.NextAttempt = time.UnixMilli(sub.St.NextAttemptMs).UTC()
		}
	}
	for _, l := range sub.St.Links {
		in.Links = append(in.Links, Link{Path: l.Path, LinkType: linkType(l), Acked: l.Acked})
	}
	return in
}

func (s *Store) wakeOf(x *stream.SubscriptionTx, sub *subscription) (Wake, error) {
	tok, err := wakeToken(x, sub.ID, sub.St.Generation, sub.St.WakeID)
	if err != nil {
		return Wake{}, err
	}
	w := Wake{SubscriptionID: sub.ID, WakeID: sub.St.WakeID, Generation: sub.St.Generation, Token: tok,
		LeaseTTL: time.Duration(sub.Cfg.LeaseTTLms) * time.Millisecond, URL: sub.Cfg.WebhookURL, CallbackBase: sub.Cfg.CallbackBase, Attempt: sub.St.Attempts}
	for _, sn := range sub.St.Snapshot {
		l := sub.link(sn.Path)
		if l == nil {
			continue
		}
		w.Streams = append(w.Streams, WakeStream{Path: sn.Path, LinkType: linkType(*l), Acked: l.Acked, Tail: sn.Tail, HasPending: sn.Tail > l.Acked})
	}
	return w, nil
}
