package host_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// paymentProvider is a real HTTP endpoint standing in for a payment provider: it records the
// Idempotency-Key of every charge, by the cart that asked for it.
type paymentProvider struct {
	*httptest.Server
	mu      sync.Mutex
	charges []charge
	got     chan struct{} // one send per charge
}

type charge struct{ cart, key string }

func newPaymentProvider(t *testing.T) *paymentProvider {
	p := &paymentProvider{got: make(chan struct{}, 16)}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.charges = append(p.charges, charge{cart: r.URL.Query().Get("cart"), key: r.Header.Get("Idempotency-Key")})
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		p.got <- struct{}{}
	}))
	t.Cleanup(p.Close)
	return p
}

// await waits for n more charges.
func (p *paymentProvider) await(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-p.got:
		case <-deadline:
			t.Fatalf("the payment provider got %d charges, want %d more", len(p.seen()), n)
		}
	}
}

func (p *paymentProvider) seen() []charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]charge(nil), p.charges...)
}

type checkoutState struct {
	CheckedOut bool `json:"checkedOut"`
}

// checkout charges a cart once it is checked out, keyed by Base.EffectKey as the docs say a call
// to an outside service must be (docs/engine.md#effect-keys).
type checkout struct {
	foldstream.Base[checkoutState]
	provider string
	hc       *http.Client
}

func newCheckout(t *testing.T, provider string) *checkout {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[checkoutState]{
		Slug: "checkout", Version: "1", Consumes: []string{"checked-out"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &checkout{Base: foldstream.NewBase(c), provider: provider, hc: &http.Client{Timeout: 10 * time.Second}}
}

func (p *checkout) Reduce(a foldstream.ReduceArgs[checkoutState]) (checkoutState, bool, error) {
	return checkoutState{CheckedOut: true}, true, nil
}

func (p *checkout) ProcessEvent(a *foldstream.ProcessEventArgs[checkoutState]) error {
	if a.Event == nil {
		return nil
	}
	ev := a.Event
	a.BlockProcessorWhile(func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.provider+"/charges?cart="+ev.Path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", p.EffectKey("charge", ev))
		resp, err := p.hc.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	return nil
}

func checkOut(t *testing.T, s *stream.Store, path string) {
	t.Helper()
	if _, err := s.Events().Stream(path).Append(context.Background(), foldtype.EventInput{Type: "checked-out"}); err != nil {
		t.Fatal(err)
	}
}

// Two carts checked out at the same offset of their own streams hand the payment provider two
// different keys: with a key unique only within a stream ("checkout/charge@1" for both), a real
// provider would take the second cart's charge for a retry of the first and never charge it.
func TestCartsCheckedOutOnTwoStreamsNeverShareAPaymentKey(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() *stream.Store) {
		ctx := context.Background()
		s := open()
		h := newHost(t, s)
		defer h.Shutdown(ctx)
		provider := newPaymentProvider(t)
		if err := host.RegisterPattern(ctx, h, "/carts/*", newCheckout(t, provider.URL)); err != nil {
			t.Fatal(err)
		}
		checkOut(t, s, "/carts/c1")
		checkOut(t, s, "/carts/c2")
		provider.await(t, 2)
		keys := map[string]string{}
		for _, c := range provider.seen() {
			if c.key == "" || !strings.HasPrefix(c.key, c.cart+"#checkout/charge@1@") {
				t.Errorf("cart %s was charged with key %q, want one starting %q", c.cart, c.key, c.cart+"#checkout/charge@1@")
			}
			if other, ok := keys[c.key]; ok && other != c.cart {
				t.Errorf("carts %s and %s were charged with the same key %q", other, c.cart, c.key)
			}
			keys[c.key] = c.cart
		}
		if len(keys) != 2 {
			t.Errorf("charges %+v: want two carts with a key each", provider.seen())
		}
	})
}

// A stream deleted and created again at its path restarts its offsets at 1; its effects still get
// new keys, so a provider that remembers the old stream's charge charges the new cart too.
func TestAStreamCreatedAgainGetsNewEffectKeys(t *testing.T) {
	t.Parallel()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := testsupport.NewFakeClock()
			s := k.open(t, clk)()
			h := newHost(t, s)
			defer h.Shutdown(ctx)
			provider := newPaymentProvider(t)
			if err := host.RegisterPattern(ctx, h, "/carts/*", newCheckout(t, provider.URL)); err != nil {
				t.Fatal(err)
			}
			checkOut(t, s, "/carts/c1")
			provider.await(t, 1)
			if err := s.Protocol().DeleteStream(ctx, "/carts/c1"); err != nil {
				t.Fatal(err)
			}
			// The new stream's first event commits a second later than the old one's did.
			clk.Advance(time.Second)
			checkOut(t, s, "/carts/c1")
			provider.await(t, 1)
			got := provider.seen()
			if len(got) != 2 {
				t.Fatalf("charges %+v, want one per incarnation of /carts/c1", got)
			}
			for _, c := range got {
				if !strings.HasPrefix(c.key, "/carts/c1#checkout/charge@1@") {
					t.Errorf("charge key %q, want one for offset 1 of /carts/c1", c.key)
				}
			}
			if got[0].key == got[1].key {
				t.Errorf("the stream created again was charged with the old stream's key %q", got[0].key)
			}
		})
	}
}
