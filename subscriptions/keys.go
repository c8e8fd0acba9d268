package subscriptions

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
)

// Webhook signing keys and wake tokens (docs/server.md#tokens-and-signatures). The keys are rows
// of the store (driver.SigningKey, beside the subscriptions), so every node of a shared database
// signs with, and publishes, the same keys.

// WebhookKey is a webhook signing key.
type WebhookKey struct {
	// KID names the key: "ds_" and the base64url RFC 7638 thumbprint of its public JWK.
	KID string
	// Private signs; its Public() half is published.
	Private ed25519.PrivateKey
	// Created is when the key was made; Retired when it stopped signing (zero: active).
	Created, Retired time.Time
}

// keysLockID is the subscription lock the creation and rotation of keys take.
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

// keysTx returns every signing key inside x, creating the first one when there is none.
func keysTx(x *stream.SubscriptionTx) ([]driver.SigningKey, error) {
	keys, err := x.SigningKeys()
	if err != nil || len(keys) > 0 {
		return keys, err
	}
	if err := x.Lock(keysLockID); err != nil {
		return nil, err
	}
	if keys, err = x.SigningKeys(); err != nil || len(keys) > 0 {
		return keys, err
	}
	k := newSigningKey(x.Now())
	if err := x.PutSigningKey(k); err != nil {
		return nil, err
	}
	return []driver.SigningKey{k}, nil
}

// WebhookKeys returns the webhook signing keys, oldest first, the active one (the newest not
// retired) last; the first call on a new store creates it.
func (s *Store) WebhookKeys(ctx context.Context) ([]WebhookKey, error) {
	var rows []driver.SigningKey
	err := s.ss.View(ctx, func(q driver.SubscriptionReader) error {
		var err error
		rows, err = q.SigningKeys(ctx)
		return err
	})
	if err == nil && len(rows) == 0 {
		err = s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
			var err error
			rows, err = keysTx(x)
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
func (s *Store) RotateWebhookKey(ctx context.Context) (WebhookKey, error) {
	var k driver.SigningKey
	err := s.ss.Update(ctx, func(x *stream.SubscriptionTx) error {
		if err := x.Lock(keysLockID); err != nil {
			return err
		}
		keys, err := x.SigningKeys()
		if err != nil {
			return err
		}
		for _, old := range keys {
			if old.RetiredMs == 0 {
				old.RetiredMs = x.Now().UnixMilli()
				if err := x.PutSigningKey(old); err != nil {
					return err
				}
			}
		}
		k = newSigningKey(x.Now())
		return x.PutSigningKey(k)
	})
	if err != nil {
		return WebhookKey{}, err
	}
	return keyOf(k)
}

// PublicJWK is the JWK of a signing key's public half, as jwks.json publishes it.
func PublicJWK(k WebhookKey) map[string]any {
	pub := k.Private.Public().(ed25519.PublicKey)
	return map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": k.KID, "use": "sig", "alg": "EdDSA",
		"x": base64.RawURLEncoding.EncodeToString(pub)}
}

// SignWebhook returns the Webhook-Signature header value of body signed with key at t:
// "t=<unix seconds>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
func SignWebhook(key WebhookKey, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	msg := make([]byte, 0, len(ts)+1+len(body))
	msg = append(append(append(msg, ts...), '.'), body...)
	return "t=" + ts + ",kid=" + key.KID + ",ed25519=" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key.Private, msg))
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
func wakeToken(x *stream.SubscriptionTx, id string, generation int64, wakeID string) (string, error) {
	keys, err := keysTx(x)
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
func checkWakeToken(x *stream.SubscriptionTx, token, id string, generation int64, wakeID string) (bool, error) {
	kid, mac64, ok := strings.Cut(token, ".")
	if !ok {
		return false, nil
	}
	mac, err := base64.RawURLEncoding.DecodeString(mac64)
	if err != nil {
		return false, nil
	}
	keys, err := x.SigningKeys()
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
