package stream

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Subscriptions: the durable half of the Durable Streams protocol's reserved subscription APIs
// (docs/server.md#subscriptions). A subscription is one row (driver.SubscriptionRow): its
// normalized configuration, and its state — one link per stream with the last acked offset, the
// wake in flight (generation, wake id, the tails it snapshotted), the worker lease, the webhook
// retry schedule. Every change is one write function of the store's writer that locks the row,
// reads it, decides, and writes it back, so two requests (or two nodes) never interleave on one
// subscription, and a wake event a pull-wake subscription writes to its wake stream commits with
// the state that issued it.
//
// Paths in this API are stream-root-relative ("events/abc"); the store path is "/" + that.

// Subscription types.
const (
	SubscriptionWebhook  = "webhook"
	SubscriptionPullWake = "pull-wake"
)

// Lease TTL bounds of a subscription (the protocol's): from 1 s to 10 min, 30 s by default.
const (
	MinSubscriptionLeaseTTL     = time.Second
	MaxSubscriptionLeaseTTL     = 10 * time.Minute
	DefaultSubscriptionLeaseTTL = 30 * time.Second
)

// Webhook retry backoff: 1 s doubling up to 60 s, each delay moved by up to ±20% at random.
const (
	WebhookRetryBase   = time.Second
	WebhookRetryMax    = 60 * time.Second
	WebhookRetryJitter = 0.2
)

// WebhookAttemptGuard is how long an attempt that was started may go without a result before the
// delivery loop tries it again (the node that started it may have died). It is longer than any
// attempt's HTTP timeout.
const WebhookAttemptGuard = 30 * time.Second

// SubscriptionConfig is a subscription's configuration, as created. NormalizeSubscriptionConfig
// puts it in the form stored and compared for idempotent re-confirmation.
type SubscriptionConfig struct {
	// Type is SubscriptionWebhook or SubscriptionPullWake.
	Type string `json:"type"`
	// Pattern is a glob over stream paths: "*" matches one segment, "**" zero or more.
	Pattern string `json:"pattern,omitempty"`
	// Streams are explicitly linked stream paths (sorted, without duplicates once normalized).
	Streams []string `json:"streams,omitempty"`
	// WebhookURL receives wakes (webhook subscriptions).
	WebhookURL string `json:"webhook_url,omitempty"`
	// WakeStream is the stream wake events are appended to (pull-wake subscriptions).
	WakeStream string `json:"wake_stream,omitempty"`
	// LeaseTTLms is the lease duration in milliseconds.
	LeaseTTLms int64 `json:"lease_ttl_ms"`
	// Description is free text.
	Description string `json:"description,omitempty"`
	// CallbackBase is the scheme and authority callback URLs are built on (the server's public
	// base URL as the creating request saw it). It is not part of the configuration's identity.
	CallbackBase string `json:"callback_base,omitempty"`
}

func subErr(code foldtype.Code, format string, args ...any) *foldtype.Error {
	return foldtype.NewError(code, nil, format, args...)
}

// NormalizeSubscriptionConfig checks c and returns it normalized: explicit streams sorted and
// deduplicated, the lease TTL defaulted. A refusal is a BAD_REQUEST error saying what to fix.
// It does not judge the webhook URL's target (the server does, by its own rules).
func NormalizeSubscriptionConfig(c SubscriptionConfig) (SubscriptionConfig, error) {
	switch c.Type {
	case SubscriptionWebhook:
		if c.WebhookURL == "" {
			return c, subErr(foldtype.CodeBadRequest, "a webhook subscription needs webhook.url")
		}
		if c.WakeStream != "" {
			return c, subErr(foldtype.CodeBadRequest, "wake_stream is for pull-wake subscriptions; remove it")
		}
	case SubscriptionPullWake:
		if c.WakeStream == "" {
			return c, subErr(foldtype.CodeBadRequest, "a pull-wake subscription needs wake_stream")
		}
		if c.WebhookURL != "" {
			return c, subErr(foldtype.CodeBadRequest, "webhook is for webhook subscriptions; remove it")
		}
		if err := checkSubPath(c.WakeStream); err != nil {
			return c, err
		}
	default:
		return c, subErr(foldtype.CodeBadRequest, `type must be "webhook" or "pull-wake"`)
	}
	if c.Pattern == "" && len(c.Streams) == 0 {
		return c, subErr(foldtype.CodeBadRequest, "give a pattern, streams, or both")
	}
	if c.Pattern != "" {
		if err := checkSubPath(c.Pattern); err != nil {
			return c, err
		}
	}
	streams := make([]string, 0, len(c.Streams))
	for _, p := range c.Streams {
		if err := checkSubPath(p); err != nil {
			return c, err
		}
		if strings.Contains(p, "*") {
			return c, subErr(foldtype.CodeBadRequest, "explicit stream %q may not contain *; use pattern for globs", p)
		}
		streams = append(streams, p)
	}
	slices.Sort(streams)
	c.Streams = slices.Compact(streams)
	if len(c.Streams) == 0 {
		c.Streams = nil
	}
	switch ttl := time.Duration(c.LeaseTTLms) * time.Millisecond; {
	case c.LeaseTTLms == 0:
		c.LeaseTTLms = DefaultSubscriptionLeaseTTL.Milliseconds()
	case ttl < MinSubscriptionLeaseTTL || ttl > MaxSubscriptionLeaseTTL:
		return c, subErr(foldtype.CodeBadRequest, "lease_ttl_ms must be from %d to %d", MinSubscriptionLeaseTTL.Milliseconds(), MaxSubscriptionLeaseTTL.Milliseconds())
	}
	return c, nil
}

// checkSubPath refuses a stream path or pattern that cannot name a stream.
func checkSubPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return subErr(foldtype.CodeBadRequest, "stream path %q: use a stream-root-relative path like events/abc (no leading or trailing slash, no empty segment)", p)
	}
	if first, _, _ := strings.Cut(p, "/"); first == "__ds" {
		return subErr(foldtype.CodeBadRequest, "stream path %q: paths under __ds are reserved", p)
	}
	return nil
}

// matchGlob reports whether the stream path matches the pattern: "*" is one whole segment, "**"
// zero or more segments, anything else a literal segment.
func matchGlob(pattern, path string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(path, "/"))
}

// matchSegs matches segment by segment in O(len(pat)·len(segs)) time and memory, however many
// "**" a pattern holds (a backtracking match is exponential in them, and patterns come from
// clients).
func matchSegs(pat, segs []string) bool {
	// cur[j] reports whether the pattern's segments so far match segs[:j].
	cur := make([]bool, len(segs)+1)
	next := make([]bool, len(segs)+1)
	cur[0] = true
	for _, p := range pat {
		if p == "**" {
			seen := false
			for j := range cur {
				seen = seen || cur[j]
				next[j] = seen
			}
		} else {
			next[0] = false
			for j := 1; j <= len(segs); j++ {
				next[j] = cur[j-1] && (p == "*" || p == segs[j-1])
			}
		}
		cur, next = next, cur
	}
	return cur[len(segs)]
}

// globPrefix is the literal part of a pattern before its first wildcard segment, as a store-path
// prefix: "events/*" → "/events/".
func globPrefix(pattern string) string {
	var b strings.Builder
	b.WriteString("/")
	for _, seg := range strings.Split(pattern, "/") {
		if seg == "*" || seg == "**" {
			break
		}
		b.WriteString(seg)
		b.WriteString("/")
	}
	return b.String()
}

// Matches reports whether the subscription links the stream at path (stream-root-relative) by
// its pattern or explicitly. Its own wake stream never matches.
func (c SubscriptionConfig) Matches(path string) bool {
	if path == c.WakeStream && c.WakeStream != "" {
		return false
	}
	if _, ok := slices.BinarySearch(c.Streams, path); ok {
		return true
	}
	return c.Pattern != "" && matchGlob(c.Pattern, path)
}

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
	Cfg SubscriptionConfig
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

func configHash(c SubscriptionConfig) string {
	c.CallbackBase = ""
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// loadSub locks and reads subscription id inside t. found is false when there is none.
func loadSub(t *tx, id string) (*subscription, bool, error) {
	if err := t.db.LockSubscription(t.ctx, id); err != nil {
		return nil, false, err
	}
	row, ok, err := t.db.Subscription(t.ctx, id)
	if err != nil || !ok {
		return nil, false, err
	}
	sub := &subscription{ID: id}
	if err := json.Unmarshal(row.Config, &sub.Cfg); err != nil {
		return nil, false, fmt.Errorf("subscription %q: corrupt configuration: %w", id, err)
	}
	if err := json.Unmarshal(row.State, &sub.St); err != nil {
		return nil, false, fmt.Errorf("subscription %q: corrupt state: %w", id, err)
	}
	return sub, true, nil
}

func mustSub(t *tx, id string) (*subscription, error) {
	sub, ok, err := loadSub(t, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, subErr(foldtype.CodeSubscriptionNotFound, "no subscription %q; create it with PUT first", id)
	}
	return sub, nil
}

func saveSub(t *tx, sub *subscription) error {
	cfg, err := json.Marshal(sub.Cfg)
	if err != nil {
		return err
	}
	st, err := json.Marshal(sub.St)
	if err != nil {
		return err
	}
	return t.db.PutSubscription(t.ctx, driver.SubscriptionRow{ID: sub.ID, Config: cfg, State: st})
}

// liveRow returns the live stream row at the stream-root-relative path, or ok=false.
func liveRow(t *tx, path string) (driver.Stream, bool, error) {
	row, err := t.db.StreamByPath(t.ctx, "/"+path)
	if errors.Is(err, driver.ErrNoStream) {
		return driver.Stream{}, false, nil
	}
	if err != nil {
		return driver.Stream{}, false, err
	}
	if row.State != 0 {
		return driver.Stream{}, false, nil
	}
	return row, true, nil
}

// refresh brings the links up to date with the store: a stream deleted drops its glob link (an
// explicit link stays, at 0); a stream created again at a linked path starts again from 0; each
// hint path the pattern matches and no link has yet is linked from 0 (it was created after the
// subscription: backfill linked every earlier one). It returns the current tail of each link.
func refresh(t *tx, sub *subscription, hints []string) (map[string]int64, error) {
	for _, p := range hints {
		if p != sub.Cfg.WakeStream && sub.Cfg.Pattern != "" && matchGlob(sub.Cfg.Pattern, p) && sub.link(p) == nil {
			sub.addLink(p, false, 0, 0)
		}
	}
	if sub.Cfg.Pattern != "" {
		// Streams the pattern matches that no link has yet were created after the subscription
		// (creation linked every earlier one): linked from their start.
		if err := backfill(t, sub, false); err != nil {
			return nil, err
		}
	}
	tails := make(map[string]int64, len(sub.St.Links))
	keep := sub.St.Links[:0]
	for _, l := range sub.St.Links {
		row, ok, err := liveRow(t, l.Path)
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
func (s *Store) issueWake(t *tx, sub *subscription, tails map[string]int64) (bool, error) {
	if sub.St.InFlight || !sub.pending(tails) {
		return false, nil
	}
	now := t.now.UnixMilli()
	sub.St.Generation++
	sub.St.WakeID = randomID("w_")
	sub.St.InFlight = true
	sub.St.Holder, sub.St.LeaseUntilMs = "", 0
	sub.St.Snapshot = snapshotOf(sub, tails)
	if sub.Cfg.Type == SubscriptionWebhook {
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
	m, err := s.liveStream(t, "/"+sub.Cfg.WakeStream)
	if err == nil && (m.Row.Closed || !IsJSONContentType(m.Row.ContentType)) {
		err = errors.New("the wake stream is closed or not a JSON stream")
	}
	if err != nil {
		// No wake stream to write to (missing, closed, not JSON): the wake is still issued, and
		// a worker can claim it; the application has to create the wake stream to be told.
		s.log.Warn("subscription: cannot write a wake event to the wake stream", "subscription", sub.ID,
			"wake_stream", sub.Cfg.WakeStream, "err", err)
		return true, nil
	}
	wakes, err := splitJSON(body, false, nil)
	if err != nil {
		return false, fmt.Errorf("subscription %q: a wake event is not JSON: %w", sub.ID, err)
	}
	var gap int64
	if _, err := s.appendTx(t, AppendRequest{Path: "/" + sub.Cfg.WakeStream, ContentType: "application/json", Body: body}, wakes, nil, &gap); err != nil {
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
func (s *Store) reissueWake(t *tx, sub *subscription) error {
	tails, err := refresh(t, sub, nil)
	if err != nil {
		return err
	}
	endWake(sub)
	_, err = s.issueWake(t, sub, tails)
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

// SubscriptionLink is one stream link as reported.
type SubscriptionLink struct {
	// Path is the stream-root-relative stream path.
	Path string
	// LinkType is "explicit" when the stream was linked explicitly (it wins over a glob), else
	// "glob".
	LinkType string
	// Acked is the last processed position, inclusive (0: none).
	Acked int64
}

// SubscriptionInfo is a subscription as reported by the read route.
type SubscriptionInfo struct {
	ID      string
	Config  SubscriptionConfig
	Created time.Time
	// Status is "active", or "failed" while a webhook retry is scheduled after a failed attempt.
	Status string
	Links  []SubscriptionLink
	// Generation is the generation of the last wake issued (0: none yet).
	Generation int64
	// NextAttempt is when the failed webhook wake is sent again (zero unless Status is "failed").
	NextAttempt time.Time
}

func linkType(l subLink) string {
	if l.Explicit {
		return "explicit"
	}
	return "glob"
}

func infoOfSub(sub *subscription) SubscriptionInfo {
	in := SubscriptionInfo{ID: sub.ID, Config: sub.Cfg, Created: time.UnixMilli(sub.St.CreatedMs).UTC(), Status: "active",
		Generation: sub.St.Generation}
	if sub.St.Failed {
		in.Status = "failed"
		if sub.St.NextAttemptMs != 0 && !sub.St.Sending {
			in.NextAttempt = time.UnixMilli(sub.St.NextAttemptMs).UTC()
		}
	}
	for _, l := range sub.St.Links {
		in.Links = append(in.Links, SubscriptionLink{Path: l.Path, LinkType: linkType(l), Acked: l.Acked})
	}
	return in
}

// PutSubscription creates subscription id with cfg (normalized here), or re-confirms it when it
// exists with the same configuration (created is false then). A different configuration under
// the id is a CONFLICT. Creation links the explicit streams and every existing stream the pattern
// matches at its current tail, so history is not replayed.
func (p *Protocol) PutSubscription(ctx context.Context, id string, cfg SubscriptionConfig) (info SubscriptionInfo, created bool, err error) {
	s := p.s
	if id == "" || strings.Contains(id, "/") {
		return info, false, subErr(foldtype.CodeBadRequest, "subscription id %q: use a non-empty id without slashes", id)
	}
	cfg, err = NormalizeSubscriptionConfig(cfg)
	if err != nil {
		return info, false, err
	}
	hash := configHash(cfg)
	err = s.write(ctx, func(t *tx) error {
		sub, ok, err := loadSub(t, id)
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
		sub = &subscription{ID: id, Cfg: cfg, St: subState{CreatedMs: t.now.UnixMilli(), Hash: hash}}
		for _, p := range cfg.Streams {
			row, ok, err := liveRow(t, p)
			if err != nil {
				return err
			}
			sub.addLink(p, true, row.ID, row.Tail) // zero values when missing
			_ = ok
		}
		if cfg.Pattern != "" {
			if err := backfill(t, sub, true); err != nil {
				return err
			}
		}
		if err := saveSub(t, sub); err != nil {
			return err
		}
		info, created = infoOfSub(sub), true
		return nil
	})
	return info, created, err
}

// backfill links every live stream the pattern matches and no link has yet: at its current tail
// (atTail, at creation) or from its start.
func backfill(t *tx, sub *subscription, atTail bool) error {
	prefix := globPrefix(sub.Cfg.Pattern)
	below, bounded := prefixUpperBound(prefix)
	q := driver.ListQuery{From: prefix, Inclusive: true, Limit: 1000}
	if bounded {
		q.Below = below
	}
	for {
		rows, err := t.db.ListStreams(t.ctx, q)
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
		if len(rows) < q.Limit {
			return nil
		}
		q.From, q.Inclusive = rows[len(rows)-1].Path, false
	}
}

// Subscription returns subscription id, or SUBSCRIPTION_NOT_FOUND.
func (p *Protocol) Subscription(ctx context.Context, id string) (SubscriptionInfo, error) {
	s := p.s
	var info SubscriptionInfo
	err := s.readTx(ctx, func(q driver.Reader) error {
		row, ok, err := q.Subscription(ctx, id)
		if err != nil {
			return err
		}
		if !ok {
			return subErr(foldtype.CodeSubscriptionNotFound, "no subscription %q", id)
		}
		sub := &subscription{ID: id}
		if err := json.Unmarshal(row.Config, &sub.Cfg); err != nil {
			return err
		}
		if err := json.Unmarshal(row.State, &sub.St); err != nil {
			return err
		}
		info = infoOfSub(sub)
		return nil
	})
	return info, err
}

// SubscriptionConfigs returns the configuration of every subscription by id.
func (p *Protocol) SubscriptionConfigs(ctx context.Context) (map[string]SubscriptionConfig, error) {
	s := p.s
	out := make(map[string]SubscriptionConfig)
	err := s.readTx(ctx, func(q driver.Reader) error {
		rows, err := q.Subscriptions(ctx)
		if err != nil {
			return err
		}
		for _, r := range rows {
			var c SubscriptionConfig
			if err := json.Unmarshal(r.Config, &c); err != nil {
				return fmt.Errorf("subscription %q: corrupt configuration: %w", r.ID, err)
			}
			out[r.ID] = c
		}
		return nil
	})
	return out, err
}

// DeleteSubscription deletes subscription id (no error when there is none). A callback, ack or
// release of one of its wakes fails afterwards, changing nothing.
func (p *Protocol) DeleteSubscription(ctx context.Context, id string) error {
	s := p.s
	return s.write(ctx, func(t *tx) error {
		if err := t.db.LockSubscription(t.ctx, id); err != nil {
			return err
		}
		return t.db.DeleteSubscription(t.ctx, id)
	})
}

// AddSubscriptionStreams links the streams explicitly, each new one at its current tail; a
// stream already linked explicitly is left as it is.
func (p *Protocol) AddSubscriptionStreams(ctx context.Context, id string, paths []string) error {
	s := p.s
	for _, p := range paths {
		if err := checkSubPath(p); err != nil {
			return err
		}
		if strings.Contains(p, "*") {
			return subErr(foldtype.CodeBadRequest, "explicit stream %q may not contain *", p)
		}
	}
	return s.write(ctx, func(t *tx) error {
		sub, err := mustSub(t, id)
		if err != nil {
			return err
		}
		for _, p := range paths {
			if p == sub.Cfg.WakeStream {
				return subErr(foldtype.CodeBadRequest, "stream %q is the subscription's own wake stream", p)
			}
			row, _, err := liveRow(t, p)
			if err != nil {
				return err
			}
			sub.addLink(p, true, row.ID, row.Tail)
		}
		return saveSub(t, sub)
	})
}

// RemoveSubscriptionStream removes the explicit link of path; a glob link the pattern still
// makes stays. Removing an absent link is no error.
func (p *Protocol) RemoveSubscriptionStream(ctx context.Context, id, path string) error {
	s := p.s
	return s.write(ctx, func(t *tx) error {
		sub, err := mustSub(t, id)
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
		return saveSub(t, sub)
	})
}

// WakeStream is one stream of a wake, as sent to a webhook or returned by a claim.
type WakeStream struct {
	Path, LinkType string
	Acked, Tail    int64
	HasPending     bool
}

// Wake is a wake handed to a worker: by webhook (an attempt the delivery loop sends) or by a
// claim.
type Wake struct {
	SubscriptionID string
	WakeID         string
	Generation     int64
	// Token authenticates the wake's callback, ack and release calls.
	Token   string
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

func (s *Store) wakeOf(t *tx, sub *subscription) (Wake, error) {
	tok, err := s.wakeToken(t, sub.ID, sub.St.Generation, sub.St.WakeID)
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

// ClaimSubscription gives the pull-wake subscription's current wake (issuing one first when
// none is in flight and work is pending) to worker, under a lease of the subscription's TTL.
// ok is false when there is nothing to claim. Another worker's live lease is ALREADY_CLAIMED,
// naming it.
func (p *Protocol) ClaimSubscription(ctx context.Context, id, worker string) (w Wake, ok bool, err error) {
	s := p.s
	if worker == "" {
		return w, false, subErr(foldtype.CodeBadRequest, "name the claiming worker in worker")
	}
	var issued bool
	err = s.write(ctx, func(t *tx) error {
		sub, err := mustSub(t, id)
		if err != nil {
			return err
		}
		if sub.Cfg.Type != SubscriptionPullWake {
			return subErr(foldtype.CodeBadRequest, "subscription %q is a webhook subscription; only pull-wake subscriptions are claimed", id)
		}
		now := t.now.UnixMilli()
		expireLease(sub, now)
		if sub.St.InFlight && sub.St.Holder != "" {
			return foldtype.NewError(foldtype.CodeAlreadyClaimed, map[string]any{"current_holder": sub.St.Holder, "generation": sub.St.Generation},
				"subscription %q is claimed by %q until its lease runs out", id, sub.St.Holder)
		}
		tails, err := refresh(t, sub, nil)
		if err != nil {
			return err
		}
		if issued, err = s.issueWake(t, sub, tails); err != nil {
			return err
		}
		ok = sub.St.InFlight
		if ok {
			sub.St.Holder = worker
			sub.St.LeaseUntilMs = now + sub.Cfg.LeaseTTLms
			sub.St.Snapshot = snapshotOf(sub, tails)
			if w, err = s.wakeOf(t, sub); err != nil {
				return err
			}
		}
		return saveSub(t, sub)
	})
	if err == nil && issued {
		s.kickSubscription(id)
	}
	return w, ok, err
}

// StreamAck acks one stream of a wake through position Offset (inclusive).
type StreamAck struct {
	Stream string
	Offset int64
}

// AckRequest is a callback (webhook) or ack (pull-wake) of a wake.
type AckRequest struct {
	WakeID     string
	Generation int64
	Acks       []StreamAck
	// Done finishes the wake; without it the call only extends the lease.
	Done bool
}

// AckSubscription applies a webhook callback (callback true) or a pull-wake ack with token: the
// acks move the links' acked offsets forward; without Done the lease is extended, with Done the
// wake ends and, when work is still pending, the next wake is issued (nextWake). A wake that is
// not the current one, or whose lease ran out, is FENCED; a token that is not this wake's is
// UNAUTHORIZED.
func (p *Protocol) AckSubscription(ctx context.Context, id, token string, callback bool, req AckRequest) (nextWake bool, err error) {
	s := p.s
	err = s.write(ctx, func(t *tx) error {
		nextWake = false
		sub, err := s.fencedSub(t, id, token, callback, req.WakeID, req.Generation)
		if err != nil {
			return err
		}
		tails, err := refresh(t, sub, nil)
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
			sub.St.LeaseUntilMs = t.now.UnixMilli() + sub.Cfg.LeaseTTLms
			if callback {
				sub.St.NextAttemptMs, sub.St.Failed, sub.St.Sending = 0, false, false // the receiver has it
			}
			return saveSub(t, sub)
		}
		endWake(sub)
		if nextWake, err = s.issueWake(t, sub, tails); err != nil {
			return err
		}
		return saveSub(t, sub)
	})
	if err == nil {
		s.kickSubscription(id)
	}
	return nextWake, err
}

// ReleaseSubscription gives a claimed pull-wake wake back without acking; when work is still
// pending the next wake is issued (and its wake event written).
func (p *Protocol) ReleaseSubscription(ctx context.Context, id, token, wakeID string, generation int64) error {
	s := p.s
	err := s.write(ctx, func(t *tx) error {
		sub, err := s.fencedSub(t, id, token, false, wakeID, generation)
		if err != nil {
			return err
		}
		if err := s.reissueWake(t, sub); err != nil {
			return err
		}
		return saveSub(t, sub)
	})
	if err == nil {
		s.kickSubscription(id)
	}
	return err
}

// fencedSub loads the subscription a token-authenticated call names and checks the fence: the
// token is this wake's, and the wake is the current one with a live lease.
func (s *Store) fencedSub(t *tx, id, token string, callback bool, wakeID string, generation int64) (*subscription, error) {
	sub, err := mustSub(t, id)
	if err != nil {
		return nil, err
	}
	if callback != (sub.Cfg.Type == SubscriptionWebhook) {
		if callback {
			return nil, subErr(foldtype.CodeBadRequest, "subscription %q is pull-wake: ack through /ack", id)
		}
		return nil, subErr(foldtype.CodeBadRequest, "subscription %q is a webhook subscription: ack through /callback", id)
	}
	okTok, err := s.checkWakeToken(t, token, id, generation, wakeID)
	if err != nil {
		return nil, err
	}
	if !okTok {
		return nil, subErr(foldtype.CodeUnauthorized, "the bearer token is not valid for this subscription's wake %q generation %d", wakeID, generation)
	}
	// A lease that ran out fences the call; its expiry itself is recorded by the delivery loop.
	expireLease(sub, t.now.UnixMilli())
	if !sub.St.InFlight || sub.St.WakeID != wakeID || sub.St.Generation != generation || (!callback && sub.St.Holder == "") {
		return nil, subErr(foldtype.CodeFenced, "wake %q generation %d is not the subscription's current wake (or its lease ran out)", wakeID, generation)
	}
	return sub, nil
}

// SubscriptionStep is what one pass of the delivery loop over a subscription left to do.
type SubscriptionStep struct {
	// Attempt is a webhook delivery to send now (nil: none).
	Attempt *Wake
	// Next is when the subscription next needs a pass (a lease running out, a retry falling due);
	// zero for none.
	Next time.Time
}

// StepSubscription is one pass of the delivery loop: it ends a wake whose lease ran out, links
// the hint streams the pattern matches (streams that changed), issues a wake when work is
// pending, and starts a due webhook attempt (recording it before it is sent, so a node that dies
// mid-attempt leaves a retry behind). A missing subscription is no error (zero step).
func (p *Protocol) StepSubscription(ctx context.Context, id string, hints []string) (SubscriptionStep, error) {
	s := p.s
	var step SubscriptionStep
	err := s.write(ctx, func(t *tx) error {
		step = SubscriptionStep{}
		sub, ok, err := loadSub(t, id)
		if err != nil || !ok {
			return err
		}
		before, _ := json.Marshal(sub.St)
		now := t.now.UnixMilli()
		expireLease(sub, now)
		tails, err := refresh(t, sub, hints)
		if err != nil {
			return err
		}
		if _, err := s.issueWake(t, sub, tails); err != nil {
			return err
		}
		if sub.Cfg.Type == SubscriptionWebhook && sub.St.InFlight && sub.St.NextAttemptMs != 0 && sub.St.NextAttemptMs <= now {
			sub.St.Attempts++
			sub.St.Sending = true
			sub.St.NextAttemptMs = now + WebhookAttemptGuard.Milliseconds()
			w, err := s.wakeOf(t, sub)
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
		return saveSub(t, sub)
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

// RecordWebhookAttempt records how the attempt of wake (id, wakeID, generation) ended: a done
// answer acks the wake's snapshot and ends it (the next wake is issued when work is pending); an
// accepted one starts the lease the receiver's callbacks extend; a failure schedules the retry
// with backoff and marks the subscription failed. An attempt whose wake is no longer current
// changes nothing.
func (p *Protocol) RecordWebhookAttempt(ctx context.Context, id, wakeID string, generation int64, out WebhookOutcome) error {
	s := p.s
	err := s.write(ctx, func(t *tx) error {
		sub, ok, err := loadSub(t, id)
		if err != nil || !ok {
			return err
		}
		if !sub.St.InFlight || sub.St.WakeID != wakeID || sub.St.Generation != generation || sub.St.NextAttemptMs == 0 {
			return nil // fenced: a callback (or another node) finished or moved the wake on
		}
		now := t.now.UnixMilli()
		sub.St.Sending = false
		switch {
		case out.Accepted && out.Done:
			for _, sn := range sub.St.Snapshot {
				if l := sub.link(sn.Path); l != nil {
					l.Acked = max(l.Acked, sn.Tail)
				}
			}
			if err := s.reissueWake(t, sub); err != nil {
				return err
			}
		case out.Accepted:
			sub.St.NextAttemptMs, sub.St.Failed = 0, false
			sub.St.LeaseUntilMs = now + sub.Cfg.LeaseTTLms
		default:
			sub.St.Failed = true
			sub.St.NextAttemptMs = now + WebhookRetryDelay(sub.St.Attempts, mrand.Float64()).Milliseconds()
		}
		return saveSub(t, sub)
	})
	if err == nil {
		s.kickSubscription(id)
	}
	return err
}

// WebhookRetryDelay is the wait before the retry that follows failed attempt number attempt
// (1-based): WebhookRetryBase doubled per earlier failure, capped at WebhookRetryMax, then moved
// by (2·u − 1)·WebhookRetryJitter of itself for u in [0, 1).
func WebhookRetryDelay(attempt int, u float64) time.Duration {
	d := WebhookRetryBase
	for i := 1; i < attempt && d < WebhookRetryMax; i++ {
		d *= 2
	}
	d = min(d, WebhookRetryMax)
	return time.Duration(float64(d) * (1 + (2*u-1)*WebhookRetryJitter))
}

// TakeSubscriptionLease takes or renews the lease that makes this node the one running
// subscription delivery, for ttl (the driver's lease, docs/postgres.md#processors-and-leases);
// ok reports whether holder has it.
func (p *Protocol) TakeSubscriptionLease(ctx context.Context, holder string, ttl time.Duration) (ok bool, err error) {
	s := p.s
	if s.closed.Load() {
		return false, ErrStoreClosed
	}
	l, ok, err := s.drv.AcquireLease(ctx, subscriptionLeaseKey, holder, "", ttl)
	if err != nil || !ok {
		return false, err
	}
	s.subLease.Store(&l)
	return true, nil
}

// ReleaseSubscriptionLease gives the delivery lease up (a graceful stop), so another node takes
// it at once.
func (p *Protocol) ReleaseSubscriptionLease(ctx context.Context, holder string) error {
	s := p.s
	l := s.subLease.Load()
	if l == nil || l.Holder != holder {
		return nil
	}
	if s.closed.Load() {
		return ErrStoreClosed
	}
	return s.drv.ReleaseLease(ctx, *l, false)
}

const subscriptionLeaseKey = "__ds/subscriptions"

// WatchSubscriptions calls kick with a subscription id whenever a call on this store changed its
// state in a way the delivery loop must act on (a wake issued or ended). One watcher; the last
// call wins; nil stops. kick must not block.
func (p *Protocol) WatchSubscriptions(kick func(id string)) {
	s := p.s
	s.subKick.Store(&kick)
}

func (s *Store) kickSubscription(id string) {
	if k := s.subKick.Load(); k != nil && *k != nil {
		(*k)(id)
	}
}

// Webhook signing keys and wake tokens.

// WebhookKey is a webhook signing key.
type WebhookKey struct {
	// KID names the key: "ds_" and the base64url RFC 7638 thumbprint of its public JWK.
	KID string
	// Private signs; its Public() half is published.
	Private ed25519.PrivateKey
	// Created is when the key was made; Retired when it stopped signing (zero: active).
	Created, Retired time.Time
}

const keysLockID = "\x00signing-keys"

func keyOf(k driver.SigningKey) (WebhookKey, error) {
	if len(k.Seed) != ed25519.SeedSize {
		return WebhookKey{}, fmt.Errorf("signing key %q: corrupt seed", k.KID)
	}
	w := WebhookKey{KID: k.KID, Private: ed25519.NewKeyFromSeed(k.Seed), Created: time.UnixMilli(k.CreatedMs)}
	if k.RetiredMs != 0 {
		w.Retired = time.UnixMilli(k.RetiredMs)
	}
	return w, nil
}

// KeyID returns the kid of an Ed25519 public key: "ds_" and the base64url (unpadded) SHA-256 of
// its RFC 7638 JWK thumbprint input.
func KeyID(pub ed25519.PublicKey) string {
	x := base64.RawURLEncoding.EncodeToString(pub)
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return "ds_" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func newSigningKey(now time.Time) driver.SigningKey {
	seed := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(seed)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return driver.SigningKey{KID: KeyID(pub), CreatedMs: now.UnixMilli(), Seed: seed}
}

// keysTx returns every signing key inside t, creating the first one when there is none.
func keysTx(t *tx) ([]driver.SigningKey, error) {
	keys, err := t.db.SigningKeys(t.ctx)
	if err != nil || len(keys) > 0 {
		return keys, err
	}
	if err := t.db.LockSubscription(t.ctx, keysLockID); err != nil {
		return nil, err
	}
	if keys, err = t.db.SigningKeys(t.ctx); err != nil || len(keys) > 0 {
		return keys, err
	}
	k := newSigningKey(t.now)
	if err := t.db.PutSigningKey(t.ctx, k); err != nil {
		return nil, err
	}
	return []driver.SigningKey{k}, nil
}

// WebhookKeys returns the webhook signing keys, oldest first, the active one (the newest not
// retired) last; the first call on a new store creates it.
func (p *Protocol) WebhookKeys(ctx context.Context) ([]WebhookKey, error) {
	s := p.s
	var rows []driver.SigningKey
	err := s.readTx(ctx, func(q driver.Reader) error {
		var err error
		rows, err = q.SigningKeys(ctx)
		return err
	})
	if err == nil && len(rows) == 0 {
		err = s.write(ctx, func(t *tx) error {
			var err error
			rows, err = keysTx(t)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	out := make([]WebhookKey, 0, len(rows))
	for _, r := range rows {
		k, err := keyOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.SortStableFunc(out, func(a, b WebhookKey) int {
		// retired keys first, then by creation
		if a.Retired.IsZero() != b.Retired.IsZero() {
			if a.Retired.IsZero() {
				return 1
			}
			return -1
		}
		return a.Created.Compare(b.Created)
	})
	return out, nil
}

// RotateWebhookKey retires the active signing key and makes a new one active. Retired keys stay
// published (deliveries signed with them keep verifying) and keep validating the wake tokens
// they issued.
func (p *Protocol) RotateWebhookKey(ctx context.Context) (WebhookKey, error) {
	s := p.s
	var k driver.SigningKey
	err := s.write(ctx, func(t *tx) error {
		if err := t.db.LockSubscription(t.ctx, keysLockID); err != nil {
			return err
		}
		keys, err := t.db.SigningKeys(t.ctx)
		if err != nil {
			return err
		}
		for _, old := range keys {
			if old.RetiredMs == 0 {
				old.RetiredMs = t.now.UnixMilli()
				if err := t.db.PutSigningKey(t.ctx, old); err != nil {
					return err
				}
			}
		}
		k = newSigningKey(t.now)
		return t.db.PutSigningKey(t.ctx, k)
	})
	if err != nil {
		return WebhookKey{}, err
	}
	return keyOf(k)
}

// tokenMAC is the wake token's MAC under the key's seed-derived secret.
func tokenMAC(seed []byte, id string, generation int64, wakeID string) []byte {
	secret := sha256.Sum256(append([]byte("foldstream wake token\x00"), seed...))
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(generation, 10)))
	m.Write([]byte{0})
	m.Write([]byte(wakeID))
	return m.Sum(nil)
}

// wakeToken is "<kid>.<base64url HMAC-SHA256 of (id, generation, wake id)>" under the active
// key: unguessable without the key, bound to one wake, and stored nowhere.
func (s *Store) wakeToken(t *tx, id string, generation int64, wakeID string) (string, error) {
	keys, err := keysTx(t)
	if err != nil {
		return "", err
	}
	active := keys[0]
	for _, k := range keys {
		if k.RetiredMs == 0 && k.CreatedMs >= active.CreatedMs {
			active = k
		}
	}
	return active.KID + "." + base64.RawURLEncoding.EncodeToString(tokenMAC(active.Seed, id, generation, wakeID)), nil
}

// checkWakeToken reports whether token is the token of wake (id, generation, wakeID), comparing
// in constant time.
func (s *Store) checkWakeToken(t *tx, token, id string, generation int64, wakeID string) (bool, error) {
	kid, mac64, ok := strings.Cut(token, ".")
	if !ok {
		return false, nil
	}
	mac, err := base64.RawURLEncoding.DecodeString(mac64)
	if err != nil {
		return false, nil
	}
	keys, err := t.db.SigningKeys(t.ctx)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k.KID == kid {
			return hmac.Equal(mac, tokenMAC(k.Seed, id, generation, wakeID)), nil
		}
	}
	return false, nil
}
