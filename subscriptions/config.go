package subscriptions

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/pathglob"
)

// Subscription types.
const (
	Webhook  = "webhook"
	PullWake = "pull-wake"
)

// Lease TTL bounds of a subscription (the protocol's): from 1 s to 10 min, 30 s by default.
const (
	MinLeaseTTL     = time.Second
	MaxLeaseTTL     = 10 * time.Minute
	DefaultLeaseTTL = 30 * time.Second
)

// Config is a subscription's configuration, as created. Normalize puts it in the form stored and
// compared for idempotent re-confirmation.
type Config struct {
	// Type is Webhook or PullWake.
	Type string `json:"type"`
	// Pattern is a glob over stream paths (package pathglob's grammar): "*" matches one segment,
	// "**" zero or more.
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

// Normalize checks c and returns it normalized: explicit streams sorted and deduplicated, the
// lease TTL defaulted. A refusal is a BAD_REQUEST error saying what to fix. It does not judge the
// webhook URL's target (CheckWebhookURL does, by the server's rules).
func Normalize(c Config) (Config, error) {
	switch c.Type {
	case Webhook:
		if c.WebhookURL == "" {
			return c, subErr(foldtype.CodeBadRequest, "a webhook subscription needs webhook.url")
		}
		if c.WakeStream != "" {
			return c, subErr(foldtype.CodeBadRequest, "wake_stream is for pull-wake subscriptions; remove it")
		}
	case PullWake:
		if c.WakeStream == "" {
			return c, subErr(foldtype.CodeBadRequest, "a pull-wake subscription needs wake_stream")
		}
		if c.WebhookURL != "" {
			return c, subErr(foldtype.CodeBadRequest, "webhook is for webhook subscriptions; remove it")
		}
		if err := checkPath(c.WakeStream); err != nil {
			return c, err
		}
	default:
		return c, subErr(foldtype.CodeBadRequest, `type must be "webhook" or "pull-wake"`)
	}
	if c.Pattern == "" && len(c.Streams) == 0 {
		return c, subErr(foldtype.CodeBadRequest, "give a pattern, streams, or both")
	}
	if c.Pattern != "" {
		if err := checkPath(c.Pattern); err != nil {
			return c, err
		}
	}
	streams := make([]string, 0, len(c.Streams))
	for _, p := range c.Streams {
		if err := checkPath(p); err != nil {
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
		c.LeaseTTLms = DefaultLeaseTTL.Milliseconds()
	case ttl < MinLeaseTTL || ttl > MaxLeaseTTL:
		return c, subErr(foldtype.CodeBadRequest, "lease_ttl_ms must be from %d to %d", MinLeaseTTL.Milliseconds(), MaxLeaseTTL.Milliseconds())
	}
	return c, nil
}

// checkPath refuses a stream path or pattern that cannot name a stream.
func checkPath(p string) error {
	if _, err := pathglob.Parse(p); err != nil || strings.HasPrefix(p, "/") {
		return subErr(foldtype.CodeBadRequest, "stream path %q: use a stream-root-relative path like events/abc (no leading or trailing slash, no empty segment)", p)
	}
	if first, _, _ := strings.Cut(p, "/"); first == "__ds" {
		return subErr(foldtype.CodeBadRequest, "stream path %q: paths under __ds are reserved", p)
	}
	return nil
}

// matchGlob reports whether the stream path matches the pattern (package pathglob's grammar).
func matchGlob(pattern, path string) bool { return pathglob.Match(pattern, path) }

// globPrefix is the literal part of a pattern before its first wildcard segment, as a store-path
// prefix: "events/*" → "/events/".
func globPrefix(pattern string) string {
	return "/" + pathglob.FromSegments(strings.Split(pattern, "/")...).LiteralPrefix()
}

// Matches reports whether the subscription links the stream at path (stream-root-relative) by
// its pattern or explicitly. Its own wake stream never matches.
func (c Config) Matches(path string) bool {
	if path == c.WakeStream && c.WakeStream != "" {
		return false
	}
	if _, ok := slices.BinarySearch(c.Streams, path); ok {
		return true
	}
	return c.Pattern != "" && matchGlob(c.Pattern, path)
}

func configHash(c Config) string {
	c.CallbackBase = ""
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
