// Package e2e holds foldstream's browser tests: the web console driven by headless Chromium
// through chromedp. It is a module of its own so that users' builds never pull chromedp; run it
// with `cd e2e && go test ./...` (needs /usr/bin/chromium, or CHROMIUM naming the binary).
package e2e
