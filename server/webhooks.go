package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Subscription delivery (docs/server.md#subscription-delivery): one loop per server decides,
// through the store, what each subscription needs — a wake issued, a webhook attempt sent, a lease
// run out — and sends webhooks with bounded concurrency. On several nodes sharing a database only
// the node holding the store's subscription-delivery lease runs passes; the others serve the
// routes (every state change is a transaction on the shared rows) and take the lease over when
// its holder stops renewing it.

// Defaults of the subscription delivery fields of Config.
const (
	// DefaultWebhookTimeout bounds one webhook attempt (connect, send, answer).
	DefaultWebhookTimeout = 10 * time.Second
	// DefaultMaxWebhookConcurrency caps the webhook attempts in flight at once.
	DefaultMaxWebhookConcurrency = 16
	// DefaultSubscriptionLeaseTTL is how long the delivery lease lasts unless renewed (on the
	// database's clock); a node that dies loses it after this. It is renewed every third of it.
	DefaultSubscriptionLeaseTTL = 10 * time.Second
	// SubscriptionPollInterval is how often the lease holder passes over every subscription
	// (catching changes made on other nodes), and how often the others look for the lease.
	SubscriptionPollInterval = 2 * time.Second
)

// errWebhookURL builds a WEBHOOK_URL_REJECTED refusal.
func errWebhookURL(format string, args ...any) error {
	return foldtype.NewError(foldtype.CodeWebhookURLRejected, nil, format, args...)
}

// checkWebhookURL applies the webhook URL rules (docs/server.md#webhook-url-validation): https to
// a public address; http or https to a loopback address only with AllowLoopbackWebhooks; never a
// private, link-local, shared, multicast or unspecified address, nor credentials in the URL. A
// host name is checked again, address by address, each time a delivery connects.
func (s *Server) checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errWebhookURL("webhook URL %q: give an absolute https:// URL", raw)
	}
	if u.User != nil {
		return errWebhookURL("webhook URL %q: credentials in the URL are not allowed", raw)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errWebhookURL("webhook URL %q: use https://", raw)
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	loop := host == "localhost" || strings.HasSuffix(host, ".localhost")
	if addr, err := netip.ParseAddr(host); err == nil {
		if reason := s.refusedAddr(addr); reason != "" {
			return errWebhookURL("webhook URL %q: %s", raw, reason)
		}
		loop = addr.Unmap().IsLoopback()
	} else if loop && !s.cfg.AllowLoopbackWebhooks {
		return errWebhookURL("webhook URL %q: loopback targets are allowed only when the server allows loopback webhooks (development)", raw)
	}
	if u.Scheme == "http" && !loop {
		return errWebhookURL("webhook URL %q: use https:// (plain http is allowed only to loopback in development)", raw)
	}
	return nil
}

// refusedAddr says why a webhook may not reach addr, or "" when it may.
func (s *Server) refusedAddr(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case addr.IsLoopback():
		if s.cfg.AllowLoopbackWebhooks {
			return ""
		}
		return "loopback targets are allowed only when the server allows loopback webhooks (development)"
	case addr.IsPrivate(), addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast(),
		addr.IsMulticast(), addr.IsUnspecified(), sharedAddr.Contains(addr), benchmarkAddr.Contains(addr), !addr.IsGlobalUnicast():
		return "private, link-local and other local network targets are not allowed"
	}
	return ""
}

var (
	sharedAddr    = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT
	benchmarkAddr = netip.MustParsePrefix("198.18.0.0/15")
)

// webhookClient is the HTTP client of deliveries: no proxy from the environment, no redirects
// (a redirect could lead anywhere), and a dialer that checks every address it connects to, so a
// name that resolves to a refused address (DNS rebinding) is never reached.
func (s *Server) webhookClient() *http.Client {
	dialer := &net.Dialer{Timeout: s.cfg.WebhookTimeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook: unexpected address %q", address)
		}
		if reason := s.refusedAddr(ap.Addr()); reason != "" {
			return fmt.Errorf("webhook: refused address %s: %s", ap.Addr(), reason)
		}
		return nil
	}}
	return &http.Client{
		Timeout: s.cfg.WebhookTimeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   s.cfg.WebhookTimeout,
			ResponseHeaderTimeout: s.cfg.WebhookTimeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// publicJWK is the JWK of a signing key's public half.
func publicJWK(k stream.WebhookKey) map[string]any {
	pub := k.Private.Public().(ed25519.PublicKey)
	return map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": k.KID, "use": "sig", "alg": "EdDSA",
		"x": base64.RawURLEncoding.EncodeToString(pub)}
}

// SignWebhook returns the Webhook-Signature header value of body signed with key at t:
// "t=<unix seconds>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
func SignWebhook(key stream.WebhookKey, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	msg := make([]byte, 0, len(ts)+1+len(body))
	msg = append(append(append(msg, ts...), '.'), body...)
	return "t=" + ts + ",kid=" + key.KID + ",ed25519=" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key.Private, msg))
}

// deliverer is the server's subscription delivery loop.
type deliverer struct {
	s      *Server
	holder string
	client *http.Client
	sem    chan struct{}

	mu      sync.Mutex
	started bool
	configs map[string]stream.SubscriptionConfig
	due     map[string][]string // subscriptions needing a pass, with the changed paths to link
	allDue  bool
	timers  map[string]timerAt // a pass scheduled per subscription
	sending map[string]bool    // a webhook attempt in flight per subscription
	reload  bool
	signal  chan struct{}
	// deadline is when the delivery lease this node holds runs out by its own monotonic clock,
	// counted from the moment the take or renewal was sent (zero: not held). Passes and webhook
	// attempts run only before it: a node woken from a freeze (a GC pause, a stopped VM) past it
	// sends nothing more until it renewed the lease, although another node may have taken
	// delivery over meanwhile. monoNow reads that clock (time.Now; tests shift it).
	deadline time.Time
	monoNow  func() time.Time
	// lapsed: the deadline passed and was logged (once per lapse).
	lapsed bool
	// exclusive: the store is a file only this process opens, so no other node can take the
	// lease over and the deadline is not checked.
	exclusive bool
}

type timerAt struct {
	at   time.Time
	stop func() bool
}

func newDeliverer(s *Server) *deliverer {
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := &deliverer{s: s, holder: s.cfg.NodeID, configs: map[string]stream.SubscriptionConfig{},
		due: map[string][]string{}, timers: map[string]timerAt{}, sending: map[string]bool{}, signal: make(chan struct{}, 1), monoNow: time.Now}
	if d.holder == "" {
		d.holder = "node-" + hex.EncodeToString(b[:])
	}
	d.sem = make(chan struct{}, s.cfg.MaxWebhookConcurrency)
	if s.st != nil {
		d.exclusive = s.st.Driver().Exclusive()
	}
	d.client = s.webhookClient()
	return d
}

func (d *deliverer) poke() {
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

// start runs the loop once (the first subscription call, or New when the store already has
// subscriptions).
func (d *deliverer) start() {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return
	}
	d.started = true
	d.reload, d.allDue = true, true
	d.mu.Unlock()
	st := d.s.st
	st.Protocol().WatchSubscriptions(func(id string) { d.markDue(id, nil) })
	stopWatch := st.Protocol().WatchChanges(d.changed)
	go func() {
		defer stopWatch()
		d.run()
	}()
}

// learn records a subscription created or re-confirmed here.
func (d *deliverer) learn(id string, cfg stream.SubscriptionConfig) {
	d.mu.Lock()
	d.configs[id] = cfg
	d.mu.Unlock()
	d.start()
	d.markDue(id, nil)
}

func (d *deliverer) forget(id string) {
	d.mu.Lock()
	delete(d.configs, id)
	d.mu.Unlock()
}

func (d *deliverer) reloadSoon() {
	d.mu.Lock()
	d.reload = true
	d.mu.Unlock()
	d.start()
	d.poke()
}

func (d *deliverer) markDue(id string, hints []string) {
	d.mu.Lock()
	d.due[id] = append(d.due[id], hints...)
	d.mu.Unlock()
	d.poke()
}

// changed is the store's change watcher: it must not block.
func (d *deliverer) changed(path string) {
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

func (d *deliverer) stopped() bool {
	select {
	case <-d.s.stopping:
		return true
	default:
		return d.s.st.Closed()
	}
}

// run is the loop: take or renew the lease, then pass over the subscriptions that need it.
func (d *deliverer) run() {
	clock := d.s.cfg.Clock
	log := d.s.log
	ctx := context.Background()
	leader := false
	var leaseAt time.Time
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
			cfgs, err := d.s.st.Protocol().SubscriptionConfigs(ctx)
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
			pollAt = now.Add(SubscriptionPollInterval)
		}
		d.mu.Lock()
		any := len(d.configs) > 0
		d.mu.Unlock()
		if any && !now.Before(leaseAt) {
			sent := d.monoNow()
			ok, err := d.s.st.Protocol().TakeSubscriptionLease(ctx, d.holder, d.s.cfg.SubscriptionLeaseTTL)
			d.mu.Lock()
			if ok && err == nil {
				d.deadline, d.lapsed = sent.Add(d.s.cfg.SubscriptionLeaseTTL), false
			} else {
				d.deadline = time.Time{}
			}
			d.mu.Unlock()
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
			leader = ok && err == nil
			leaseAt = now.Add(d.s.cfg.SubscriptionLeaseTTL / 3)
		} else if !any && leader {
			d.mu.Lock()
			d.deadline = time.Time{}
			d.mu.Unlock()
			if err := d.s.st.Protocol().ReleaseSubscriptionLease(ctx, d.holder); err != nil && !d.stopped() {
				log.Warn("subscriptions: release the delivery lease", "err", err)
			}
			leader = false
		}
		if leader {
			d.passes(ctx)
		}
		// Sleep until the next poll, lease renewal, or a signal.
		next := pollAt
		if any && leaseAt.Before(next) {
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
		case <-d.s.stopping:
		}
	}
	if stopTick != nil {
		stopTick()
	}
	if leader {
		_ = d.s.st.Protocol().ReleaseSubscriptionLease(ctx, d.holder)
	}
}

// holdsLease reports whether the delivery lease is still this node's by its local deadline, and
// logs the first time it is not (see deliverer.deadline).
func (d *deliverer) holdsLease() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.exclusive || d.monoNow().Before(d.deadline) {
		return true
	}
	if !d.lapsed && !d.deadline.IsZero() {
		d.lapsed = true
		d.s.log.Warn("subscriptions: the delivery lease is past its local deadline; no pass or webhook attempt until it is renewed",
			"node", d.holder)
	}
	return false
}

// passes runs one pass for each subscription that needs one.
func (d *deliverer) passes(ctx context.Context) {
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

func (d *deliverer) pass(ctx context.Context, id string, hints []string) {
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
	step, err := d.s.st.Protocol().StepSubscription(ctx, id, hints)
	if err != nil {
		if !d.stopped() {
			d.s.log.Warn("subscriptions: pass", "subscription", id, "err", err)
			d.schedule(id, d.s.cfg.Clock.Now().Add(time.Second))
		}
		return
	}
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
func (d *deliverer) schedule(id string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.timers[id]; ok {
		if !t.at.After(at) {
			return
		}
		t.stop()
	}
	clock := d.s.cfg.Clock
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
func (d *deliverer) send(w stream.Wake) {
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
	if err := d.s.st.Protocol().RecordWebhookAttempt(ctx, w.SubscriptionID, w.WakeID, w.Generation, out); err != nil && !d.stopped() {
		d.s.log.Warn("subscriptions: record a webhook attempt", "subscription", w.SubscriptionID, "err", err)
	}
}

func (d *deliverer) attempt(w stream.Wake) stream.WebhookOutcome {
	log := d.s.log.With(slog.String("subscription", w.SubscriptionID), slog.String("wake_id", w.WakeID),
		slog.Int64("generation", w.Generation), slog.Int("attempt", w.Attempt))
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WebhookTimeout)
	defer cancel()
	keys, err := d.s.st.Protocol().WebhookKeys(ctx)
	if err != nil || len(keys) == 0 {
		log.Warn("subscriptions: no webhook signing key", "err", err)
		return stream.WebhookOutcome{}
	}
	body, _ := json.Marshal(map[string]any{
		"subscription_id": w.SubscriptionID, "wake_id": w.WakeID, "generation": w.Generation,
		"streams":        wakeStreamsJSON(w.Streams),
		"callback_url":   w.CallbackBase + d.s.cfg.Prefix + "__ds/subscriptions/" + url.PathEscape(w.SubscriptionID) + "/callback",
		"callback_token": w.Token,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		log.Warn("subscriptions: webhook request", "err", err)
		return stream.WebhookOutcome{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Signature", SignWebhook(keys[len(keys)-1], d.s.cfg.Clock.Now(), body))
	req.Header.Set("User-Agent", "foldstream-webhook")
	resp, err := d.client.Do(req)
	if err != nil {
		log.Info("subscriptions: webhook attempt failed; retrying with backoff", "err", err)
		return stream.WebhookOutcome{}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		log.Info("subscriptions: webhook answered an error; retrying with backoff", "status", resp.StatusCode)
		return stream.WebhookOutcome{}
	}
	var done struct {
		Done bool `json:"done"`
	}
	_ = json.Unmarshal(answer, &done) // any other answer is an accepted, asynchronous wake
	return stream.WebhookOutcome{Accepted: true, Done: done.Done}
}
