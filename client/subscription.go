package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Subscriptions is a handle to the Durable Streams subscription APIs of one server
// (docs/client.md#subscriptions): create, read and delete subscriptions, and claim, ack and
// release pull-wake wakes, or run a pull-wake worker loop with RunWorker. Safe for concurrent use.
type Subscriptions struct {
	root string // the stream root, ending in "/"
	s    *Stream
}

// NewSubscriptions returns a handle for the subscription APIs under the stream root streamRoot
// (for example "http://127.0.0.1:4437/v1/stream/"). opts are used as by NewStream.
func NewSubscriptions(streamRoot string, opts Config) (*Subscriptions, error) {
	root := strings.TrimRight(streamRoot, "/") + "/"
	s, err := NewStream(root+"__ds", opts)
	if err != nil {
		return nil, err
	}
	return &Subscriptions{root: root, s: s}, nil
}

// SubscriptionSpec is the configuration of a subscription to create.
type SubscriptionSpec struct {
	// Type is "webhook" or "pull-wake".
	Type string
	// Pattern is a glob over stream paths relative to the stream root ("events/*"; "**" matches
	// any number of segments).
	Pattern string
	// Streams are explicitly linked stream paths.
	Streams []string
	// WebhookURL receives wakes (webhook subscriptions).
	WebhookURL string
	// WakeStream is the JSON stream wake events are written to (pull-wake subscriptions); the
	// application creates it.
	WakeStream string
	// LeaseTTL is the lease of a wake (1 s to 10 min; the server's default of 30 s when zero).
	LeaseTTL time.Duration
	// Description is free text.
	Description string
}

// SubscriptionLink is one stream of a subscription.
type SubscriptionLink struct {
	Path        string `json:"path"`
	LinkType    string `json:"link_type"`
	AckedOffset string `json:"acked_offset"`
}

// SubscriptionInfo is a subscription as the server reports it.
type SubscriptionInfo struct {
	ID         string             `json:"id"`
	Type       string             `json:"type"`
	Pattern    string             `json:"pattern"`
	Streams    []SubscriptionLink `json:"streams"`
	WakeStream string             `json:"wake_stream"`
	LeaseTTLms int64              `json:"lease_ttl_ms"`
	Status     string             `json:"status"`
	Generation int64              `json:"generation"`
	Webhook    *struct {
		URL     string `json:"url"`
		Signing *struct {
			Alg     string `json:"alg"`
			KID     string `json:"kid"`
			JWKSURL string `json:"jwks_url"`
		} `json:"signing"`
	} `json:"webhook"`
}

// WakeStream is one stream of a wake.
type WakeStream struct {
	Path        string `json:"path"`
	LinkType    string `json:"link_type"`
	AckedOffset string `json:"acked_offset"`
	TailOffset  string `json:"tail_offset"`
	HasPending  bool   `json:"has_pending"`
}

// Wake is a claimed pull-wake wake: read each stream after AckedOffset up to TailOffset, then
// ack.
type Wake struct {
	SubscriptionID string       `json:"-"`
	WakeID         string       `json:"wake_id"`
	Generation     int64        `json:"generation"`
	Token          string       `json:"token"`
	Streams        []WakeStream `json:"streams"`
	LeaseTTLms     int64        `json:"lease_ttl_ms"`
}

// Ack acks one stream of a wake through Offset, inclusive.
type Ack struct {
	Stream string `json:"stream"`
	Offset string `json:"offset"`
}

// AckAll returns the acks of every stream of w at its tail: "everything of this wake is done".
func (w *Wake) AckAll() []Ack {
	out := make([]Ack, 0, len(w.Streams))
	for _, s := range w.Streams {
		out = append(out, Ack{Stream: s.Path, Offset: s.TailOffset})
	}
	return out
}

func (c *Subscriptions) subURL(id string, tail ...string) string {
	u := c.root + "__ds/subscriptions/" + url.PathEscape(id)
	for _, t := range tail {
		u += "/" + t
	}
	return u
}

// call sends a JSON request and decodes a 2xx JSON answer into out (when not nil). Refusals are
// coded errors: ErrFenced, ErrAlreadyClaimed, ErrSubscriptionNotFound, ErrWebhookURLRejected, ….
func (c *Subscriptions) call(ctx context.Context, op, method, u, token string, in, out any, mode retryMode) (int, error) {
	var body []byte
	h := http.Header{}
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, &Error{Code: CodeInvalidArgument, Op: op, Err: err}
		}
		h.Set("Content-Type", "application/json")
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	resp, b, err := c.s.do(ctx, op, method, u, h, body, mode)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, statusError(op, u, resp, b)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, &Error{Code: CodeParse, Op: op, URL: u, Message: "the answer is not the expected JSON", Err: err}
		}
	}
	return resp.StatusCode, nil
}

// Create creates subscription id, or re-confirms it when it exists with the same configuration
// (created is false then); another configuration under the id is ErrConflict.
func (c *Subscriptions) Create(ctx context.Context, id string, spec SubscriptionSpec) (info SubscriptionInfo, created bool, err error) {
	in := map[string]any{"type": spec.Type}
	if spec.Pattern != "" {
		in["pattern"] = spec.Pattern
	}
	if len(spec.Streams) > 0 {
		in["streams"] = spec.Streams
	}
	if spec.WebhookURL != "" {
		in["webhook"] = map[string]string{"url": spec.WebhookURL}
	}
	if spec.WakeStream != "" {
		in["wake_stream"] = spec.WakeStream
	}
	if spec.LeaseTTL > 0 {
		in["lease_ttl_ms"] = spec.LeaseTTL.Milliseconds()
	}
	if spec.Description != "" {
		in["description"] = spec.Description
	}
	// PUT of one configuration is idempotent: safe to retry.
	status, err := c.call(ctx, "create subscription", http.MethodPut, c.subURL(id), "", in, &info, retryAll)
	return info, status == http.StatusCreated, err
}

// Get reads subscription id.
func (c *Subscriptions) Get(ctx context.Context, id string) (SubscriptionInfo, error) {
	var info SubscriptionInfo
	_, err := c.call(ctx, "get subscription", http.MethodGet, c.subURL(id), "", nil, &info, retryAll)
	return info, err
}

// Delete deletes subscription id (no error when there is none).
func (c *Subscriptions) Delete(ctx context.Context, id string) error {
	_, err := c.call(ctx, "delete subscription", http.MethodDelete, c.subURL(id), "", nil, nil, retryAll)
	return err
}

// Claim claims the pull-wake subscription's current wake for worker. It returns nil (and no
// error) when nothing is pending, and ErrAlreadyClaimed (an *Error whose Message names the
// holder) when another worker holds the lease.
func (c *Subscriptions) Claim(ctx context.Context, id, worker string) (*Wake, error) {
	w := &Wake{SubscriptionID: id}
	status, err := c.call(ctx, "claim wake", http.MethodPost, c.subURL(id, "claim"), "", map[string]string{"worker": worker}, w, retryStatus)
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	return w, nil
}

// Ack acks the wake's streams; without done it only extends the lease (a heartbeat), with done it
// finishes the wake and reports whether the server issued the next one at once. A wake that is
// no longer current (its lease ran out, another worker took over) is ErrFenced.
func (c *Subscriptions) Ack(ctx context.Context, w *Wake, acks []Ack, done bool) (nextWake bool, err error) {
	if acks == nil {
		acks = []Ack{}
	}
	var out struct {
		NextWake bool `json:"next_wake"`
	}
	_, err = c.call(ctx, "ack wake", http.MethodPost, c.subURL(w.SubscriptionID, "ack"), w.Token,
		map[string]any{"wake_id": w.WakeID, "generation": w.Generation, "acks": acks, "done": done}, &out, retryStatus)
	return out.NextWake, err
}

// Release gives the wake back without acking, for another claim; ErrFenced when it is no longer
// current.
func (c *Subscriptions) Release(ctx context.Context, w *Wake) error {
	_, err := c.call(ctx, "release wake", http.MethodPost, c.subURL(w.SubscriptionID, "release"), w.Token,
		map[string]any{"wake_id": w.WakeID, "generation": w.Generation}, nil, retryStatus)
	return err
}

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	// Subscription is the pull-wake subscription's id.
	Subscription string
	// Worker names this worker to the server (the holder other workers are told about).
	Worker string
	// Handle processes one claimed wake: typically it reads each stream of w after AckedOffset up
	// to TailOffset. Returning nil acks every stream at its tail and finishes the wake; an error
	// releases the wake, so it is claimed again. ctx ends when the worker stops or the wake is
	// fenced (context.Cause is then an ErrFenced error).
	Handle func(ctx context.Context, w *Wake) error
	// OnError, when set, is told of every error the loop goes on after (a fenced ack, a failed
	// claim); RunWorker returns only when ctx ends or the subscription is gone.
	OnError func(err error)
}

// errWorkerStopped is the cause of a handler's context when the worker stops.
var errWorkerStopped = errors.New("worker stopped")

// RunWorker runs a pull-wake worker until ctx ends: it claims the subscription's wake, runs
// Handle under the lease (extending it every third of the lease while Handle runs), acks or
// releases, and between wakes waits for the next wake event on the subscription's wake stream
// (a long-poll read). Losing the race to another worker is not an error: it waits for the next
// wake event. It returns ctx's error, or the coded error that makes going on pointless
// (ErrSubscriptionNotFound, ErrUnauthorized, ErrForbidden, a missing wake stream).
func (c *Subscriptions) RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if cfg.Handle == nil || cfg.Subscription == "" || cfg.Worker == "" {
		return &Error{Code: CodeInvalidArgument, Op: "run worker", Message: "give Subscription, Worker and Handle"}
	}
	report := func(err error) {
		if cfg.OnError != nil && err != nil && ctx.Err() == nil {
			cfg.OnError(err)
		}
	}
	info, err := c.Get(ctx, cfg.Subscription)
	if err != nil {
		return err
	}
	if info.WakeStream == "" {
		return &Error{Code: CodeInvalidArgument, Op: "run worker", Message: "subscription " + cfg.Subscription + " is not a pull-wake subscription"}
	}
	wakes, err := NewStream(c.root+info.WakeStream, Config{HTTPClient: c.s.hc, Header: c.s.header, Retry: c.s.retry, Clock: c.s.clock, Logger: c.s.log})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		// The wake stream's tail before the claim: a wake event written after a claim that found
		// nothing is then never missed.
		meta, err := wakes.Head(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		w, err := c.Claim(ctx, cfg.Subscription, cfg.Worker)
		switch {
		case errors.Is(err, ErrSubscriptionNotFound), errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden):
			return err
		case err != nil && !errors.Is(err, ErrAlreadyClaimed):
			report(err)
			if serr := sleep(ctx, c.s.clock, time.Second); serr != nil {
				return serr
			}
			continue
		case err == nil && w != nil:
			report(c.process(ctx, cfg, w))
			continue
		}
		// Nothing to claim (or another worker has it): wait for the next wake event.
		for chunk, rerr := range wakes.Read(ctx, ReadOptions{Offset: meta.NextOffset, Live: LiveLongPoll}) {
			if rerr != nil {
				report(rerr)
				break
			}
			if !chunk.Empty() || chunk.Closed {
				break
			}
		}
	}
	return ctx.Err()
}

// process runs one claimed wake: Handle under heartbeats, then ack or release.
func (c *Subscriptions) process(ctx context.Context, cfg WorkerConfig, w *Wake) error {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errWorkerStopped)
	var wg sync.WaitGroup
	stopBeat := make(chan struct{})
	every := time.Duration(w.LeaseTTLms) * time.Millisecond / 3
	if every <= 0 {
		every = time.Second
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			fired := make(chan struct{})
			stop := c.s.clock.AfterFunc(every, func() { close(fired) })
			select {
			case <-stopBeat:
				stop()
				return
			case <-hctx.Done():
				stop()
				return
			case <-fired:
			}
			if _, err := c.Ack(hctx, w, nil, false); err != nil {
				if errors.Is(err, ErrFenced) {
					cancel(err)
					return
				}
				if cfg.OnError != nil && hctx.Err() == nil {
					cfg.OnError(err)
				}
			}
		}
	}()
	herr := cfg.Handle(hctx, w)
	close(stopBeat)
	wg.Wait()
	if cause := context.Cause(hctx); errors.Is(cause, ErrFenced) {
		return cause
	}
	// The outcome is reported even when the worker is stopping: work done is acked, work given up
	// is released (bounded, so a server that does not answer cannot hold the worker).
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	if herr != nil {
		if err := c.Release(fctx, w); err != nil {
			return errors.Join(herr, err)
		}
		return herr
	}
	_, err := c.Ack(fctx, w, w.AckAll(), true)
	return err
}
