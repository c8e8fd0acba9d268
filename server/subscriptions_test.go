package server_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/subscriptions"
	"github.com/foldstream/foldstream/testsupport"
)

// hookRequest is one webhook delivery a receiver got.
type hookRequest struct {
	raw     []byte
	sig     string
	payload struct {
		SubscriptionID string `json:"subscription_id"`
		WakeID         string `json:"wake_id"`
		Generation     int64  `json:"generation"`
		Streams        []struct {
			Path       string `json:"path"`
			TailOffset string `json:"tail_offset"`
			HasPending bool   `json:"has_pending"`
		} `json:"streams"`
		CallbackURL   string `json:"callback_url"`
		CallbackToken string `json:"callback_token"`
	}
}

// receiver is a webhook receiver on 127.0.0.1; answer decides each response by its 1-based
// number.
type receiver struct {
	url string
	got chan hookRequest
	// close stops the receiver once every request it is serving has been answered (what it got
	// is on got by then); later deliveries fail to connect.
	close func()
}

func newReceiver(t testing.TB, answer func(n int, w http.ResponseWriter)) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan hookRequest, 64)}
	var mu sync.Mutex
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := hookRequest{raw: b, sig: r.Header.Get("Webhook-Signature")}
		if err := json.Unmarshal(b, &h.payload); err != nil {
			t.Errorf("webhook body: %v: %s", err, b)
		}
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		rc.got <- h
		answer(k, w)
	}))
	var once sync.Once
	rc.close = func() { once.Do(ts.Close) }
	t.Cleanup(rc.close)
	rc.url = ts.URL + "/hook"
	return rc
}

func (rc *receiver) next(t testing.TB) hookRequest {
	t.Helper()
	select {
	case h := <-rc.got:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook delivery within 10 s")
		return hookRequest{}
	}
}

func answerDone(_ int, w http.ResponseWriter) { _, _ = io.WriteString(w, `{"done":true}`) }

// subNode is one server over its own store, with the subscription delivery loop a node runs
// beside it.
type subNode struct {
	url      string
	st       *stream.Store
	srv      *server.Server
	delivery *subscriptions.Delivery
	ts       *httptest.Server
	// shift moves the monotonic clock the delivery checks its lease's local deadline against
	// (shiftDeliveryClock).
	shift atomic.Int64
}

// close stops the node as a crash would for the delivery lease: the store goes first, so the
// lease is not given up.
func (n *subNode) close() {
	n.ts.Close()
	n.st.Close(context.Background())
	n.srv.Shutdown(context.Background())
	n.delivery.Shutdown(context.Background())
}

// shiftDeliveryClock moves the monotonic clock the node's delivery loop checks its lease's local
// deadline against by d, as a freeze of the process for d would.
func (n *subNode) shiftDeliveryClock(d time.Duration) { n.shift.Store(int64(d)) }

func startNode(t testing.TB, dsn string, clock foldtype.Clock, dcfg subscriptions.DeliveryConfig) *subNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := stream.Config{Logger: quiet, Clock: clock}
	st, err := storeopen.Open(context.Background(), dsn, storeopen.Config{Store: opts})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, st, server.Config{Logger: quiet, AllowLoopbackWebhooks: true})
	ts := httptest.NewServer(srv)
	n := &subNode{url: ts.URL, st: st, srv: srv, ts: ts}
	dcfg.Logger = quiet
	dcfg.AllowLoopbackWebhooks = true
	dcfg.MonotonicNow = func() time.Time { return time.Now().Add(time.Duration(n.shift.Load())) }
	n.delivery = subscriptions.StartDelivery(st, dcfg)
	t.Cleanup(n.close)
	return n
}

func putSub(t testing.TB, base, id, body string) map[string]any {
	t.Helper()
	res, b := request(t, "PUT", base+"/v1/stream/__ds/subscriptions/"+id, body, "Content-Type", "application/json")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create subscription %s: %d %s", id, res.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func getSub(t *testing.T, base, id string) map[string]any {
	t.Helper()
	res, b := request(t, "GET", base+"/v1/stream/__ds/subscriptions/"+id, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("get subscription %s: %d %s", id, res.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func putStream(t testing.TB, base, path, body string) {
	t.Helper()
	res, b := request(t, "PUT", base+"/v1/stream/"+path, body, "Content-Type", "application/json")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create %s: %d %s", path, res.StatusCode, b)
	}
}

func jwks(t *testing.T, url string) map[string]ed25519.PublicKey {
	t.Helper()
	res, b := request(t, "GET", url, "")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/jwk-set+json") {
		t.Fatalf("jwks: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	var set struct {
		Keys []struct{ Kty, Crv, Kid, Alg, X string }
	}
	if err := json.Unmarshal([]byte(b), &set); err != nil {
		t.Fatal(err)
	}
	out := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "EdDSA" || len(x) != ed25519.PublicKeySize {
			t.Fatalf("jwk %+v: not an Ed25519 public key (%v)", k, err)
		}
		out[k.Kid] = x
	}
	return out
}

var sigRe = regexp.MustCompile(`^t=(\d+),kid=([^,]+),ed25519=([A-Za-z0-9_-]+)$`)

// verify checks a delivery's Webhook-Signature against the key set.
func verify(t *testing.T, h hookRequest, keys map[string]ed25519.PublicKey) {
	t.Helper()
	m := sigRe.FindStringSubmatch(h.sig)
	if m == nil {
		t.Fatalf("Webhook-Signature %q: not t=…,kid=…,ed25519=…", h.sig)
	}
	pub, ok := keys[m[2]]
	if !ok {
		t.Fatalf("signature kid %q is not in the served key set", m[2])
	}
	sig, err := base64.RawURLEncoding.DecodeString(m[3])
	if err != nil || !ed25519.Verify(pub, []byte(m[1]+"."+string(h.raw)), sig) {
		t.Fatalf("signature does not verify over %s.<body> (%v)", m[1], err)
	}
	tampered := append([]byte(m[1]+"."), h.raw...)
	tampered[len(tampered)-2] ^= 1
	if ed25519.Verify(pub, tampered, sig) {
		t.Fatal("the signature also verifies a changed body")
	}
}

// TestWebhookSignatureVerifiesAgainstServedJWKS: a delivery's Ed25519 signature verifies over
// "<t>.<raw body>" with the key the JWKS serves under the header's kid, the payload names the
// subscription, the stream and a callback URL on this server, and the key (and kid) are the same
// after the server and its store restart.
func TestWebhookSignatureVerifiesAgainstServedJWKS(t *testing.T) {
	dsn := t.TempDir() + "/subs.db"
	n := startNode(t, dsn, nil, subscriptions.DeliveryConfig{})
	rc := newReceiver(t, answerDone)
	created := putSub(t, n.url, "sig", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	signing := created["webhook"].(map[string]any)["signing"].(map[string]any)
	if signing["alg"] != "ed25519" || !strings.HasPrefix(signing["kid"].(string), "ds_") || signing["jwks_url"] != n.url+"/v1/stream/__ds/jwks.json" {
		t.Fatalf("signing metadata: %v", signing)
	}
	keys := jwks(t, signing["jwks_url"].(string))
	putStream(t, n.url, "events/a", `{"n":1}`)
	h := rc.next(t)
	verify(t, h, keys)
	p := h.payload
	if p.SubscriptionID != "sig" || p.Generation != 1 || p.CallbackURL != n.url+"/v1/stream/__ds/subscriptions/sig/callback" ||
		len(p.Streams) != 1 || p.Streams[0].Path != "events/a" || !p.Streams[0].HasPending || p.CallbackToken == "" {
		t.Fatalf("payload: %+v", p)
	}
	n.close()
	n2 := startNode(t, dsn, nil, subscriptions.DeliveryConfig{})
	again := jwks(t, n2.url+"/v1/stream/__ds/jwks.json")
	if len(again) != 1 || !again[signing["kid"].(string)].Equal(keys[signing["kid"].(string)]) {
		t.Fatalf("after a restart the key set is %v, want the same key %s", again, signing["kid"])
	}
}

// TestWebhookURLsAreRefusedUnlessSafe: private, link-local, loopback (without the allowance) and
// non-https targets are refused with 400 WEBHOOK_URL_REJECTED; the loopback allowance admits
// loopback and nothing else.
func TestWebhookURLsAreRefusedUnlessSafe(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), t.TempDir()+"/ssrf.db", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	strict := httptest.NewServer(newServer(t, st, server.Config{Logger: quiet}))
	defer strict.Close()
	dev := httptest.NewServer(newServer(t, st, server.Config{Logger: quiet, AllowLoopbackWebhooks: true}))
	defer dev.Close()
	body := func(u string) string {
		return `{"type":"webhook","pattern":"nothing/*","webhook":{"url":"` + u + `"}}`
	}
	refusedEverywhere := []string{"http://10.0.0.1/hook", "https://192.168.1.5/hook", "https://172.16.0.1/hook",
		"https://169.254.169.254/latest/meta-data", "https://[fe80::1]/hook", "https://[fd00::1]/hook", "https://100.64.0.1/hook",
		"https://0.0.0.0/hook", "https://[::]/hook", "https://224.0.0.1/hook", "ftp://example.com/hook", "https://user:pw@example.com/hook",
		"http://example.com/hook", "/relative/hook", "https://[::ffff:10.0.0.1]/hook"}
	for i, u := range refusedEverywhere {
		for _, base := range []string{strict.URL, dev.URL} {
			res, b := request(t, "PUT", fmt.Sprintf("%s/v1/stream/__ds/subscriptions/r%d", base, i), body(u), "Content-Type", "application/json")
			wantCoded(t, u, res, b, http.StatusBadRequest, foldtype.CodeWebhookURLRejected)
			if !strings.Contains(b, `"code":"WEBHOOK_URL_REJECTED"`) {
				t.Fatalf("%s: body %s lacks the JSON error code", u, b)
			}
		}
	}
	for i, u := range []string{"http://127.0.0.1:9/hook", "https://localhost/hook", "http://[::1]:9/hook", "http://app.localhost/hook"} {
		res, b := request(t, "PUT", fmt.Sprintf("%s/v1/stream/__ds/subscriptions/l%d", strict.URL, i), body(u), "Content-Type", "application/json")
		wantCoded(t, u+" without the loopback allowance", res, b, http.StatusBadRequest, foldtype.CodeWebhookURLRejected)
		if res, b := request(t, "PUT", fmt.Sprintf("%s/v1/stream/__ds/subscriptions/l%d", dev.URL, i), body(u), "Content-Type", "application/json"); res.StatusCode != http.StatusCreated {
			t.Fatalf("%s with the loopback allowance: %d %s", u, res.StatusCode, b)
		}
	}
	if res, b := request(t, "PUT", strict.URL+"/v1/stream/__ds/subscriptions/public", body("https://hooks.example.com/x"), "Content-Type", "application/json"); res.StatusCode != http.StatusCreated {
		t.Fatalf("a public https URL: %d %s", res.StatusCode, b)
	}
}

// TestFailedWebhookIsRetriedWithBackoffOnTheClock: a receiver answering 500 twice gets the same
// wake again only when the server's clock reaches the persisted next attempt, 1 s then 2 s later
// (±20%); the subscription reads "failed" meanwhile; the third attempt's done acks the wake.
func TestFailedWebhookIsRetriedWithBackoffOnTheClock(t *testing.T) {
	clock := testsupport.NewFakeClock()
	n := startNode(t, t.TempDir()+"/retry.db", clock, subscriptions.DeliveryConfig{})
	rc := newReceiver(t, func(k int, w http.ResponseWriter) {
		if k <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		answerDone(k, w)
	})
	putSub(t, n.url, "retry", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	putStream(t, n.url, "events/a", `{"n":1}`)
	first := rc.next(t)
	for attempt, base := range []time.Duration{time.Second, 2 * time.Second} {
		failedAt := clock.Now()
		var next time.Time
		waitFor(t, "the retry to be scheduled", func() bool {
			s := getSub(t, n.url, "retry")
			at, _ := s["next_attempt_at"].(string)
			if s["status"] != "failed" || at == "" {
				return false
			}
			next, _ = time.Parse(time.RFC3339Nano, at)
			return next.After(failedAt)
		})
		if d := next.Sub(failedAt); d < base*8/10 || d > base*12/10 {
			t.Fatalf("retry %d scheduled %v after the failure, want %v ± 20%%", attempt+1, d, base)
		}
		select {
		case h := <-rc.got:
			t.Fatalf("attempt before the clock reached the retry time: %+v", h.payload)
		default:
		}
		clock.Advance(next.Sub(clock.Now()))
		h := rc.next(t)
		if h.payload.WakeID != first.payload.WakeID || h.payload.Generation != first.payload.Generation {
			t.Fatalf("retry %d: wake %s/%d, want the same wake %s/%d", attempt+1, h.payload.WakeID, h.payload.Generation,
				first.payload.WakeID, first.payload.Generation)
		}
	}
	waitFor(t, "the done answer to ack the wake", func() bool {
		s := getSub(t, n.url, "retry")
		links, _ := s["streams"].([]any)
		return s["status"] == "active" && len(links) == 1 && links[0].(map[string]any)["acked_offset"] == first.payload.Streams[0].TailOffset
	})
}

// waitFor polls cond (a condition on the server's state) until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !wait.For(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestSlowOrDeadWebhookReceiverCostsOnlyItsOwnRetries: a receiver that never answers (cut by the
// webhook timeout) and one whose port is closed both leave their subscriptions failed with a
// retry scheduled, while a healthy receiver of another subscription is delivered to at once.
func TestSlowOrDeadWebhookReceiverCostsOnlyItsOwnRetries(t *testing.T) {
	n := startNode(t, t.TempDir()+"/slow.db", nil, subscriptions.DeliveryConfig{WebhookTimeout: 300 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	slow := newReceiver(t, func(_ int, w http.ResponseWriter) { <-release })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String() + "/hook"
	ln.Close()
	healthy := newReceiver(t, answerDone)
	putSub(t, n.url, "slow", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+slow.url+`"}}`)
	putSub(t, n.url, "dead", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+deadURL+`"}}`)
	putSub(t, n.url, "healthy", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+healthy.url+`"}}`)
	putStream(t, n.url, "events/a", `{"n":1}`)
	slow.next(t) // the slow receiver holds its request
	start := time.Now()
	if h := healthy.next(t); h.payload.SubscriptionID != "healthy" {
		t.Fatalf("healthy receiver got %+v", h.payload)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the healthy delivery waited %v behind the slow receiver", d)
	}
	for _, id := range []string{"slow", "dead"} {
		waitFor(t, id+" to be marked failed", func() bool {
			s := getSub(t, n.url, id)
			return s["status"] == "failed" && s["next_attempt_at"] != nil
		})
	}
	if s := getSub(t, n.url, "healthy"); s["status"] != "active" {
		t.Fatalf("healthy subscription: %v", s)
	}
}

type claimed struct {
	WakeID     string `json:"wake_id"`
	Generation int64  `json:"generation"`
	Token      string `json:"token"`
	Streams    []struct {
		Path       string `json:"path"`
		TailOffset string `json:"tail_offset"`
	} `json:"streams"`
}

func claim(t *testing.T, base, id, worker string) (*http.Response, string, claimed) {
	t.Helper()
	res, b := request(t, "POST", base+"/v1/stream/__ds/subscriptions/"+id+"/claim", `{"worker":"`+worker+`"}`, "Content-Type", "application/json")
	var c claimed
	if res.StatusCode == http.StatusOK {
		if err := json.Unmarshal([]byte(b), &c); err != nil {
			t.Fatal(err)
		}
	}
	return res, b, c
}

func ackWake(t *testing.T, base, id string, c claimed, done bool) (*http.Response, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"wake_id": c.WakeID, "generation": c.Generation, "done": done,
		"acks": []map[string]string{{"stream": c.Streams[0].Path, "offset": c.Streams[0].TailOffset}}})
	return request(t, "POST", base+"/v1/stream/__ds/subscriptions/"+id+"/ack", string(body),
		"Content-Type", "application/json", "Authorization", "Bearer "+c.Token)
}

// TestPullWakeWorkerKilledMidClaimLosesItsLease: a worker that claimed and died holds the wake
// only until its lease runs out on the server's clock; then another worker claims the next
// generation, and the dead worker's late ack is FENCED.
func TestPullWakeWorkerKilledMidClaimLosesItsLease(t *testing.T) {
	clock := testsupport.NewFakeClock()
	n := startNode(t, t.TempDir()+"/pull.db", clock, subscriptions.DeliveryConfig{})
	putStream(t, n.url, "wake", `[]`)
	putSub(t, n.url, "pool", `{"type":"pull-wake","pattern":"events/*","wake_stream":"wake","lease_ttl_ms":1000}`)
	putStream(t, n.url, "events/a", `{"n":1}`)
	res, b, dead := claim(t, n.url, "pool", "worker-1")
	if res.StatusCode != http.StatusOK || dead.Generation < 1 || len(dead.Streams) != 1 {
		t.Fatalf("first claim: %d %s", res.StatusCode, b)
	}
	res, b, _ = claim(t, n.url, "pool", "worker-2")
	wantCoded(t, "claim while worker-1 holds the lease", res, b, http.StatusConflict, foldtype.CodeAlreadyClaimed)
	if !strings.Contains(b, `"current_holder":"worker-1"`) {
		t.Fatalf("ALREADY_CLAIMED body %s does not name worker-1", b)
	}
	// Worker-1 is killed: it never acks. Its lease runs out 1 s later.
	clock.Advance(1001 * time.Millisecond)
	res, b, live := claim(t, n.url, "pool", "worker-2")
	if res.StatusCode != http.StatusOK || live.Generation <= dead.Generation || live.WakeID == dead.WakeID {
		t.Fatalf("claim after the lease ran out: %d %s (dead worker had generation %d)", res.StatusCode, b, dead.Generation)
	}
	res, b = ackWake(t, n.url, "pool", dead, true)
	wantCoded(t, "the dead worker's late ack", res, b, http.StatusConflict, foldtype.CodeFenced)
	res, b = ackWake(t, n.url, "pool", live, true)
	if res.StatusCode != http.StatusOK || strings.TrimSpace(b) != `{"next_wake":false,"ok":true}` {
		t.Fatalf("live worker's ack: %d %s", res.StatusCode, b)
	}
	// The wake stream holds one wake event per generation issued.
	res, b = request(t, "GET", n.url+"/v1/stream/wake?offset=-1", "")
	var evs []map[string]any
	if err := json.Unmarshal([]byte(b), &evs); err != nil || res.StatusCode != http.StatusOK || len(evs) != int(live.Generation) {
		t.Fatalf("wake stream: %d %s (%v), want %d wake events", res.StatusCode, b, err, live.Generation)
	}
}

// TestUndeliveredWakeIsDeliveredAfterRestart: a wake whose deliveries failed while its receiver
// was down is still owed after the server and its store restart, and is delivered (same wake)
// once the persisted retry time comes.
func TestUndeliveredWakeIsDeliveredAfterRestart(t *testing.T) {
	clock := testsupport.NewFakeClock()
	dsn := t.TempDir() + "/restart.db"
	n := startNode(t, dsn, clock, subscriptions.DeliveryConfig{LeaseTTL: testLeaseTTL})
	var mu sync.Mutex
	up := false
	rc := newReceiver(t, func(k int, w http.ResponseWriter) {
		mu.Lock()
		ok := up
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		answerDone(k, w)
	})
	putSub(t, n.url, "owed", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	putStream(t, n.url, "events/a", `{"n":1}`)
	first := rc.next(t)
	waitFor(t, "the failure to be recorded", func() bool { return getSub(t, n.url, "owed")["status"] == "failed" })
	n.close()

	mu.Lock()
	up = true
	mu.Unlock()
	n2 := startNode(t, dsn, clock, subscriptions.DeliveryConfig{LeaseTTL: testLeaseTTL})
	s := getSub(t, n2.url, "owed")
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(s["next_attempt_at"]))
	if s["status"] != "failed" || err != nil {
		t.Fatalf("after restart: %v (%v), want the failed wake with its retry time", s, err)
	}
	// The retry falls due on the server's clock; the dead node's lease runs out on the database's.
	clock.Advance(at.Sub(clock.Now()))
	h := driveUntilDelivered(t, clock, rc)
	if h.payload.WakeID != first.payload.WakeID {
		t.Fatalf("after restart got wake %s, want the owed wake %s", h.payload.WakeID, first.payload.WakeID)
	}
	waitFor(t, "the wake to be acked", func() bool {
		links, _ := getSub(t, n2.url, "owed")["streams"].([]any)
		return len(links) == 1 && links[0].(map[string]any)["acked_offset"] == first.payload.Streams[0].TailOffset
	})
}

// deliveryHolder reads who holds the subscription-delivery lease on a PostgreSQL store.
func deliveryHolder(t *testing.T, st *stream.Store) string {
	t.Helper()
	var holder string
	err := st.Driver().(*pgdriver.Driver).Pool().QueryRow(context.Background(),
		`SELECT holder FROM leases WHERE key = '__ds/subscriptions'`).Scan(&holder)
	if err != nil {
		t.Fatalf("read the delivery lease: %v", err)
	}
	return holder
}

// TestTwoNodesRunOneDeliveryLoopAndADeadNodesMoves: two servers over one PostgreSQL database
// (separate stores and connection pools, one shared clock) deliver each wake once, from the node
// holding the delivery lease, whichever node took the append; when that node dies without giving
// the lease up, the other takes it over once it runs out and delivers what is pending.
//
// The lease runs out on the database's clock, which the test cannot hold still, while the nodes
// time their renewals on the fake clock. So the lease is long (node-a keeps it while it lives,
// however slowly this machine runs), and the test makes it run out itself once node-a is dead.
// A short lease renewed by moving the fake clock every few milliseconds made this test fail now
// and then on a loaded machine: a stall of the lease's length (300 ms) anywhere between the clock
// and node-a's renewal let node-b take the lease from a live node-a, as a lease should.
func TestTwoNodesRunOneDeliveryLoopAndADeadNodesMoves(t *testing.T) {
	dsn := pgtest.URL(t)
	clock := testsupport.NewFakeClock()
	const ttl = 10 * time.Minute
	a := startNode(t, dsn, clock, subscriptions.DeliveryConfig{NodeID: "node-a", LeaseTTL: ttl})
	rc := newReceiver(t, answerDone)
	putSub(t, a.url, "shared", `{"type":"webhook","pattern":"events/*","webhook":{"url":"`+rc.url+`"}}`)
	waitFor(t, "node-a to take the delivery lease", func() bool {
		var n int
		_ = a.st.Driver().(*pgdriver.Driver).Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM leases WHERE key = '__ds/subscriptions' AND holder = 'node-a'`).Scan(&n)
		return n == 1
	})
	b := startNode(t, dsn, clock, subscriptions.DeliveryConfig{NodeID: "node-b", LeaseTTL: ttl})
	seen := map[string]bool{}
	for i := range 3 {
		putStream(t, b.url, fmt.Sprintf("events/%d", i), `{"n":1}`) // appended on node-b
		h := rc.next(t)
		if seen[h.payload.WakeID] {
			t.Fatalf("wake %s delivered twice", h.payload.WakeID)
		}
		seen[h.payload.WakeID] = true
		waitFor(t, "the wake to be acked", func() bool {
			s := getSub(t, b.url, "shared")
			for _, l := range s["streams"].([]any) {
				if l.(map[string]any)["path"] == fmt.Sprintf("events/%d", i) {
					return l.(map[string]any)["acked_offset"] == server.FormatOffset(1) // its one message
				}
			}
			return false
		})
	}
	if h := deliveryHolder(t, b.st); h != "node-a" {
		t.Fatalf("delivery lease held by %q, want node-a", h)
	}
	select {
	case h := <-rc.got:
		t.Fatalf("a second delivery loop sent wake %s again", h.payload.WakeID)
	default:
	}

	a.close() // dies holding the lease
	putStream(t, b.url, "events/after", `{"n":1}`)
	// The database's clock passes the dead node's lease; then node-b's next try for it falls due.
	tag, err := b.st.Driver().(*pgdriver.Driver).Pool().Exec(context.Background(),
		`UPDATE leases SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE key = '__ds/subscriptions' AND holder = 'node-a'`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("run node-a's delivery lease out: %v (%d rows), want its one lease", err, tag.RowsAffected())
	}
	clock.Advance(ttl / 3)
	h := driveUntilDelivered(t, clock, rc)
	if seen[h.payload.WakeID] || !strings.Contains(string(h.raw), `"events/after"`) {
		t.Fatalf("after node-a died: got wake %s (%s), want a new wake for events/after", h.payload.WakeID, h.raw)
	}
	if holder := deliveryHolder(t, b.st); holder != "node-b" {
		t.Fatalf("delivery lease held by %q after node-a died, want node-b", holder)
	}
	// Each wake once, judged when nothing more can arrive: the subscription's deliveries are sent
	// one at a time, so once a later wake (a sentinel's) is delivered, the deliverer is done with
	// every earlier one; then both nodes are stopped, and the receiver, closed, has answered every
	// request it got (what it got is on rc.got by then).
	seen[h.payload.WakeID] = true
	putStream(t, b.url, "events/sentinel", `{"n":1}`)
	for {
		h := driveUntilDelivered(t, clock, rc)
		if seen[h.payload.WakeID] {
			t.Fatalf("wake %s delivered again (%s) after it was delivered and acked", h.payload.WakeID, h.raw)
		}
		seen[h.payload.WakeID] = true
		if strings.Contains(string(h.raw), `"events/sentinel"`) {
			break
		}
	}
	b.close()
	rc.close()
	for {
		select {
		case h := <-rc.got:
			t.Fatalf("wake %s delivered again (%s) after it was delivered and acked", h.payload.WakeID, h.raw)
		default:
			return
		}
	}
}

// testLeaseTTL is the delivery lease of the tests where a node dies holding it: it runs out on
// the database's clock, so the survivor takes over after this much real time.
const testLeaseTTL = 300 * time.Millisecond

// driveUntilDelivered moves the fake clock on in small steps — the delivery loop's retries of the
// lease run on it — until the receiver gets a delivery, failing after 10 s.
func driveUntilDelivered(t *testing.T, clock *testsupport.FakeClock, rc *receiver) hookRequest {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case h := <-rc.got:
			return h
		case <-deadline:
			t.Fatal("no webhook delivery within 10 s")
		case <-time.After(20 * time.Millisecond):
			clock.Advance(testLeaseTTL / 3)
		}
	}
}
