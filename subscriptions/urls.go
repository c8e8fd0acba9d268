package subscriptions

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// Webhook URL rules (docs/server.md#webhook-url-validation), applied twice: to the URL when a
// subscription is created (CheckWebhookURL, by the server), and to every address a delivery
// connects to (the delivery's HTTP client), so a name that resolves to a refused address (DNS
// rebinding) is never reached.

// errWebhookURL builds a WEBHOOK_URL_REJECTED refusal.
func errWebhookURL(format string, args ...any) error {
	return foldtype.NewError(foldtype.CodeWebhookURLRejected, nil, format, args...)
}

// CheckWebhookURL applies the webhook URL rules: https to a public address; http or https to a
// loopback address only with allowLoopback; never a private, link-local, shared, multicast or
// unspecified address, nor credentials in the URL. A refusal is WEBHOOK_URL_REJECTED. A host name
// is checked again, address by address, each time a delivery connects.
func CheckWebhookURL(raw string, allowLoopback bool) error {
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
		if reason := refusedAddr(addr, allowLoopback); reason != "" {
			return errWebhookURL("webhook URL %q: %s", raw, reason)
		}
		loop = addr.Unmap().IsLoopback()
	} else if loop && !allowLoopback {
		return errWebhookURL("webhook URL %q: loopback targets are allowed only when the server allows loopback webhooks (development)", raw)
	}
	if u.Scheme == "http" && !loop {
		return errWebhookURL("webhook URL %q: use https:// (plain http is allowed only to loopback in development)", raw)
	}
	return nil
}

// refusedAddr says why a webhook may not reach addr, or "" when it may.
func refusedAddr(addr netip.Addr, allowLoopback bool) string {
	addr = addr.Unmap()
	switch {
	case addr.IsLoopback():
		if allowLoopback {
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
func webhookClient(timeout time.Duration, allowLoopback bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook: unexpected address %q", address)
		}
		if reason := refusedAddr(ap.Addr(), allowLoopback); reason != "" {
			return fmt.Errorf("webhook: refused address %s: %s", ap.Addr(), reason)
		}
		return nil
	}}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
