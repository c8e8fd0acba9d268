package subscriptions

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/membership"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream"
)

// Subscription delivery (docs/server.md#delivery-loop-nodes-and-restarts): one loop per node
// decides, through the store, what each subscription needs — a wake issued, a webhook attempt
// sent, a lease run out — and sends webhooks with bounded concurrency. On several nodes sharing a
// database only the node holding the delivery lease runs passes; the others serve the routes
// (every state change is a transaction on the shared rows) and take the lease over when its
// holder stops renewing it. The runtime starts it beside the host (package node); the HTTP server
// only maps the routes.

// Defaults of DeliveryConfig.
const (
	// DefaultWebhookTimeout bounds one webhook attempt (connect, send, answer).
	DefaultWebhookTimeout = 10 * time.Second
	// DefaultMaxWebhookConcurrency caps the webhook attempts in flight at once.
	DefaultMaxWebhookConcurrency = 16
	// DefaultDeliveryLeaseTTL is how long the delivery lease lasts unless renewed (on the
	// database's clock); a node that dies loses it after this. It is renewed every third of it.
	DefaultDeliveryLeaseTTL = 10 * time.Second
	// PollInterval is how often the lease holder passes over every subscription (catching
	// changes made on other nodes), and how often the others look for the lease.
	PollInterval = 2 * time.Second
	// DefaultPrefix is the URL path prefix callback URLs are built on when DeliveryConfig.Prefix
	// is empty: the server's default stream prefix.
	DefaultPrefix = "/v1/stream/"
)

// DeliveryLeaseKey is the driver lease the delivery loop of one node holds while it delivers.
const DeliveryLeaseKey = "__ds/subscriptions"

// DeliveryConfig configures a Delivery. Its zero value is valid.
type DeliveryConfig struct {
	// NodeID names this node as the holder of the delivery lease when several nodes share a
	// database. Defaults to a random name.
	NodeID string
	// LeaseTTL is how long the delivery lease lasts unless renewed (on the database's clock):
	// another node takes delivery over this long after the holder died. Defaults to
	// DefaultDeliveryLeaseTTL (10 s).
	LeaseTTL time.Duration
	// WebhookTimeout bounds one webhook delivery attempt. Defaults to DefaultWebhookTimeout (10 s).
	WebhookTimeout time.Duration
	// MaxWebhookConcurrency caps the webhook attempts in flight at once. Defaults to
	// DefaultMaxWebhookConcurrency (16).
	MaxWebhookConcurrency int
	// AllowLoopbackWebhooks lets deliveries connect to loopback addresses (the server's
	// Config.AllowLoopbackWebhooks, which admits such URLs; give both the same value).
	AllowLoopbackWebhooks bool
	// Prefix is the URL path prefix the server serves streams under (server.Config.Prefix), for
	// the callback URL of a webhook. Defaults to DefaultPrefix.
	Prefix string
	// Clock schedules passes, retries and lease renewals. Defaults to the store's clock.
	Clock foldtype.Clock
	// Logger receives the delivery's logs. Defaults to the store's logger.
	Logger *slog.Logger
	// MonotonicNow reads the local monotonic clock the lease's local deadline is checked against
	// (see Delivery). Defaults to time.Now; tests shift it to stand for a frozen process.
	MonotonicNow func() time.Time
}

// Delivery is a node's subscription delivery loop. [StartDelivery] starts it; [Delivery.Shutdown]
// stops it and gives the lease up.
type Delivery struct {
	subs   *Store
	ss     *stream.SubscriptionStore
	cfg    DeliveryConfig
	log    *slog.Logger
	holder string
	client *http.Client
	sem    chan struct{}

	stopping chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when the loop ended

	mu      sync.Mutex
	configs map[string]Config
	due     map[string][]string // subscriptions needing a pass, with the changed paths to link
	// linked is, per stream path, the subscriptions that link it explicitly (POST …/streams),
	// as their last pass found them: a commit on such a stream makes them due even when their
	// pattern does not match it.
	linked map[string]map[string]bool
	// linksOf is linked by subscription: the paths its last pass found linked explicitly.
	linksOf map[string][]string
	allDue  bool
	timers  map[string]timerAt // a pass scheduled per subscription
	sending map[string]bool    // a webhook attempt in flight per subscription
	reload  bool
	signal  chan struct{}
	// lease is the delivery lease (membership.Leader: one node delivers). It keeps the lease's
	// local deadline on the monotonic clock (DeliveryConfig.MonotonicNow), counted from the moment
	// the take or renewal was sent; passes and webhook attempts run only before it: a node woken
	// from a freeze (a GC pause, a stopped VM) past it sends nothing more until it renewed the
	// lease, although another node may have taken delivery over meanwhile. On an exclusive store
	// (a file only this process opens) no other node can take the lease over and the deadline is
	// not checked.
	lease *membership.Leader
}

type timerAt struct {
	at   time.Time
	stop func() bool
}

// withDefaults fills cfg's defaults (those that do not need a store).
func (cfg DeliveryConfig) withDefaults() DeliveryConfig {
	if cfg.WebhookTimeout <= 0 {
		cfg.WebhookTimeout = DefaultWebhookTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultDeliveryLeaseTTL
	}
	if cfg.MaxWebhookConcurrency <= 0 {
		cfg.MaxWebhookConcurrency = DefaultMaxWebhookConcurrency
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(cfg.Prefix, "/") {
		cfg.Prefix = "/" + cfg.Prefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.MonotonicNow == nil {
		cfg.MonotonicNow = time.Now
	}
	if cfg.NodeID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.NodeID = "node-" + hex.EncodeToString(b[:])
	}
	return cfg
}

func newDelivery(cfg DeliveryConfig) *Delivery {
	cfg = cfg.withDefaults()
	return &Delivery{cfg: cfg, log: cfg.Logger, holder: cfg.NodeID, configs: map[string]Config{},
		due: map[string][]string{}, linked: map[string]map[string]bool{}, linksOf: map[string][]string{}, timers: map[string]timerAt{}, sending: map[string]bool{}, signal: make(chan struct{}, 1),
		sem:    make(chan struct{}, cfg.MaxWebhookConcurrency),
		client: webhookClient(cfg.WebhookTimeout, cfg.AllowLoopbackWebhooks), stopping: make(chan struct{}), done: make(chan struct{})}
}

// StartDelivery starts the delivery loop of st's subscriptions: it takes the delivery lease while
// subscriptions exist, and as its holder issues wakes for appends (on every node, through the
// store's change notices), sends webhooks, retries and ends expired leases. Start one per node,
// beside the host; stop it with Shutdown before the store closes.
func StartDelivery(st *stream.Store, cfg DeliveryConfig) *Delivery {
	ss := st.Subscriptions()
	if cfg.Clock == nil {
		cfg.Clock = ss.Clock()
	}
	if cfg.Logger == nil {
		cfg.Logger = ss.Logger()
	}
	d := newDelivery(cfg)
	d.subs, d.ss = New(st), ss
	d.lease = membership.NewLeader(membership.LeaderConfig{Taker: ss, Key: DeliveryLeaseKey, Holder: d.holder,
		TTL: d.cfg.LeaseTTL, Now: d.cfg.MonotonicNow, Exclusive: ss.Exclusive()})
	d.reload, d.allDue = true, true
	stopKicks := ss.Watch(d.kicked)
	stopChanges := ss.WatchChanges(d.changed)
	go func() {
		defer close(d.done)
		defer stopChanges()
		defer stopKicks()
		d.run()
	}()
	return d
}

// Shutdown stops the loop and gives the delivery lease up, so another node takes it at once. It
// waits for the loop to end until ctx ends; webhook attempts in flight finish on their own
// (their results are recorded while the store is open). Calling it again waits again.
func (d *Delivery) Shutdown(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stopping) })
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Delivery) poke() {
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

// kicked is the store's subscription notice (a subscription changed in this process): it must
// not block. A subscription the loop does not know yet (just created) makes it reload the
// configurations.
func (d *Delivery) kicked(id string) {
	d.mu.Lock()
	if _, ok := d.configs[id]; !ok {
		d.reload = true
	}
	d.mu.Unlock()
	d.markDue(id, nil)
}

func (d *Delivery) forget(id string) {
	d.mu.Lock()
	delete(d.configs, id)
	d.setLinksLocked(id, nil)
	d.mu.Unlock()
}

// setLinksLocked records that subscription id links paths explicitly (d.mu held).
func (d *Delivery) setLinksLocked(id string, paths []string) {
	for _, p := range d.linksOf[id] {
		if ids := d.linked[p]; ids != nil {
			delete(ids, id)
			if len(ids) == 0 {
				delete(d.linked, p)
			}
		}
	}
	if len(paths) == 0 {
		delete(d.linksOf, id)
		return
	}
	d.linksOf[id] = paths
	for _, p := range paths {
		ids := d.linked[p]
		if ids == nil {
			ids = map[string]bool{}
			d.linked[p] = ids
		}
		ids[id] = true
	}
}

func (d *Delivery) markDue(id string, hints []string) {
	d.mu.Lock()
	d.due[id] = append(d.due[id], hints...)
	d.mu.Unlock()
	d.poke()
}

// changed is the store's change watcher: it must not block.
func (d *Delivery) changed(path string) {
	d.mu.Lock()
	if path == "" {
		d.allDue = true
	} else {
		rel := strings.TrimPrefix(path, "/")
		for id, c := range d.configs {
			if c.Matches(rel) {
				d.due[id] = append(d.due[id], rel)
			}
		}
		for id := range d.linked[rel] {
			if _, ok := d.due[id]; !ok {
				d.due[id] = nil // its pass reads every stream it links
			}
		}
	}
	n := len(d.due)
	// allDue waits for a pass, which only a node with subscriptions runs: without any, a commit
	// has nothing to deliver, and poking the loop would cost every commit a wake of its goroutine.
	all := d.allDue && len(d.configs) > 0
	d.mu.Unlock()
	if n > 0 || all {
		d.poke()
	}
}

func (d *Delivery) stopped() bool {
	select {
	case <-d.stopping:
		return true
	default:
		return d.ss.Closed()
	}
}

// run is the loop: take or renew the lease, then pass over the subscriptions that need it.
func (d *Delivery) run() {
	clock := d.cfg.Clock
	log := d.log
	ctx := context.Background()
	leader := false
	var pollAt time.Time
	tick := make(chan struct{}, 1)
	var stopTick func() bool
	for !d.stopped() {
		now := clock.Now()
		d.mu.Lock()
		reload := d.reload || !now.Before(pollAt)
		d.reload = false
		d.mu.Unlock()
		if reload {
			cfgs, err := d.subs.Configs(ctx)
			if err != nil {
				if d.stopped() {
					return
				}
				log.Warn("subscriptions: list", "err", err)
			} else {
				d.mu.Lock()
				d.configs = cfgs
				d.allDue = true
				d.mu.Unlock()
			}
			pollAt = now.Add(PollInterval)
		}
		d.mu.Lock()
		any := len(d.configs) > 0
		d.mu.Unlock()
		if any && !now.Before(d.lease.Next()) {
			ok, err := d.lease.Take(ctx, now)
			if err != nil {
				if d.stopped() {
					return
				}
				log.Warn("subscriptions: take the delivery lease", "err", err)
			}
			if ok && !leader {
				log.Debug("subscriptions: this node runs delivery", "node", d.holder)
				d.mu.Lock()
				d.allDue = true
				d.mu.Unlock()
			}
			leader = ok
		} else if !any && leader {
			if err := d.lease.Release(ctx); err != nil && !d.stopped() {
				log.Warn("subscriptions: release the delivery lease", "err", err)
			}
			leader = false
		}
		if leader {
			d.passes(ctx)
		}
		// Sleep until the next poll, lease renewal, or a signal.
		next := pollAt
		if leaseAt := d.lease.Next(); any && leaseAt.Before(next) {
			next = leaseAt
		}
		if stopTick != nil {
			stopTick()
		}
		stopTick = clock.AfterFunc(max(0, next.Sub(clock.Now())), func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-d.signal:
		case <-tick:
		case <-d.stopping:
		}
	}
	if stopTick != nil {
		stopTick()
	}
	if leader {
		_ = d.lease.Release(ctx)
	}
}

// holdsLease reports whether the delivery lease is still this node's by its local deadline, and
// logs the first time it is not (see Delivery.lease).
func (d *Delivery) holdsLease() bool {
	ok, lapsed := d.lease.Holds()
	if lapsed {
		d.log.Warn("subscriptions: the delivery lease is past its local deadline; no pass or webhook attempt until it is renewed",
			"node", d.holder)
	}
	return ok
}

// passes runs one pass for each subscription that needs one.
func (d *Delivery) passes(ctx context.Context) {
	if !d.holdsLease() {
		return // the passes owed stay due for after the renewal
	}
	d.mu.Lock()
	due := d.due
	d.due = map[string][]string{}
	if d.allDue {
		for id := range d.configs {
			if _, ok := due[id]; !ok {
				due[id] = nil
			}
		}
		d.allDue = false
	}
	d.mu.Unlock()
	for id, hints := range due {
		d.pass(ctx, id, hints)
	}
}

func (d *Delivery) pass(ctx context.Context, id string, hints []string) {
	d.mu.Lock()
	busy := d.sending[id]
	d.mu.Unlock()
	if busy {
		// The attempt's result triggers the next pass; keep the hints for it.
		if len(hints) > 0 {
			d.mu.Lock()
			d.due[id] = append(d.due[id], hints...)
			d.mu.Unlock()
		}
		return
	}
	if !d.holdsLease() {
		d.markDue(id, hints) // for after the renewal
		return
	}
	step, err := d.subs.Step(ctx, id, hints)
	if err != nil {
		if !d.stopped() {
			d.log.Warn("subscriptions: pass", "subscription", id, "err", err)
			d.schedule(id, d.cfg.Clock.Now().Add(time.Second))
		}
		return
	}
	if step.Gone {
		d.forget(id) // deleted
		return
	}
	d.mu.Lock()
	d.setLinksLocked(id, step.Explicit)
	d.mu.Unlock()
	if !step.Next.IsZero() {
		d.schedule(id, step.Next)
	}
	if step.Attempt != nil {
		d.mu.Lock()
		d.sending[id] = true
		d.mu.Unlock()
		go d.send(*step.Attempt)
	}
}

// schedule arranges a pass of id at at (keeping an earlier one).
func (d *Delivery) schedule(id string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.timers[id]; ok {
		if !t.at.After(at) {
			return
		}
		t.stop()
	}
	clock := d.cfg.Clock
	var self timerAt
	self.at = at
	self.stop = clock.AfterFunc(max(0, at.Sub(clock.Now())), func() {
		d.mu.Lock()
		if cur, ok := d.timers[id]; ok && cur.at.Equal(at) {
			delete(d.timers, id)
		}
		d.mu.Unlock()
		d.markDue(id, nil)
	})
	d.timers[id] = self
}

// send makes one webhook attempt and records its outcome.
func (d *Delivery) send(w Wake) {
	defer func() {
		d.mu.Lock()
		delete(d.sending, w.SubscriptionID)
		d.mu.Unlock()
		d.markDue(w.SubscriptionID, nil)
	}()
	d.sem <- struct{}{}
	if !d.holdsLease() {
		// Woken past the lease (or it was lost): the attempt is not sent and not recorded, as if
		// this node had died; the lease's holder sends it once the attempt's guard lapses.
		<-d.sem
		return
	}
	out := d.attempt(w)
	<-d.sem
	ctx := context.Background()
	if err := d.subs.RecordAttempt(ctx, w.SubscriptionID, w.WakeID, w.Generation, out); err != nil && !d.stopped() {
		d.log.Warn("subscriptions: record a webhook attempt", "subscription", w.SubscriptionID, "err", err)
	}
}

// WakeStreamsJSON is the streams array of a wake notification or claim, in the protocol's shape.
func WakeStreamsJSON(ws []WakeStream) []map[string]any {
	out := make([]map[string]any, 0, len(ws))
	for _, x := range ws {
		out = append(out, map[string]any{"path": x.Path, "link_type": x.LinkType, "acked_offset": wire.FormatOffset(x.Acked),
			"tail_offset": wire.FormatOffset(x.Tail), "has_pending": x.HasPending})
	}
	return out
}

func (d *Delivery) attempt(w Wake) WebhookOutcome {
	log := d.log.With(slog.String("subscription", w.SubscriptionID), slog.String("wake_id", w.WakeID),
		slog.Int64("generation", w.Generation), slog.Int("attempt", w.Attempt))
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.WebhookTimeout)
	defer cancel()
	keys, err := d.subs.WebhookKeys(ctx)
	if err != nil || len(keys) == 0 {
		log.Warn("subscriptions: no webhook signing key", "err", err)
		return WebhookOutcome{}
	}
	body, _ := json.Marshal(map[string]any{
		"subscription_id": w.SubscriptionID, "wake_id": w.WakeID, "generation": w.Generation,
		"streams":        WakeStreamsJSON(w.Streams),
		"callback_url":   w.CallbackBase + d.cfg.Prefix + "__ds/subscriptions/" + url.PathEscape(w.SubscriptionID) + "/callback",
		"callback_token": w.Token,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		log.Warn("subscriptions: webhook request", "err", err)
		return WebhookOutcome{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Signature", SignWebhook(keys[len(keys)-1], d.cfg.Clock.Now(), body))
	req.Header.Set("User-Agent", "foldstream-webhook")
	resp, err := d.client.Do(req)
	if err != nil {
		log.Info("subscriptions: webhook attempt failed; retrying with backoff", "err", err)
		return WebhookOutcome{}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		log.Info("subscriptions: webhook answered an error; retrying with backoff", "status", resp.StatusCode)
		return WebhookOutcome{}
	}
	var done struct {
		Done bool `json:"done"`
	}
	_ = json.Unmarshal(answer, &done) // any other answer is an accepted, asynchronous wake
	return WebhookOutcome{Accepted: true, Done: done.Done}
}
