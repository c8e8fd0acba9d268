package bench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

func TestWriteMarkdownQuotesMediansAndRatios(t *testing.T) {
	t.Parallel()
	sc := bench.Scenario{Name: "append", Detail: "d", Metrics: []bench.Metric{{Name: "messages/s", HigherBetter: true}}}
	res := bench.Result{
		Scenario: sc,
		Samples: map[string][]bench.Sample{
			"foldstream": {{"messages/s": 9000}, {"messages/s": 12000}, {"messages/s": 10000}},
			"reference":  {{"messages/s": 1000}, {"messages/s": 3000}, {"messages/s": 2000}},
		},
		Errors: map[string][]string{"reference": {"round 4: boom"}},
	}
	var b strings.Builder
	if err := bench.WriteMarkdown(&b, bench.Environment{Rounds: 3}, []string{"foldstream", "reference"}, []bench.Result{res}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| append | messages/s (higher is better) | 10,000 | 2,000 | 5.00× |",
		"| append | server CPU µs/msg (lower is better) | — | — | — |",
		"| append | messages/s | foldstream | 9,000, 12,000, 10,000 |",
		"- append, reference: round 4: boom",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
}

func TestWriteMarkdownWithThreeTargetsComparesEachToTheReferenceAndPostgresToSQLite(t *testing.T) {
	t.Parallel()
	sc := bench.Scenario{Name: "catch-up", Detail: "d", Metrics: []bench.Metric{{Name: "MB/s", HigherBetter: true}}, PeakRSS: true}
	res := bench.Result{
		Scenario: sc,
		Samples: map[string][]bench.Sample{
			"foldstream":    {{"MB/s": 300, "server peak RSS MB": 40}},
			"foldstream-pg": {{"MB/s": 240, "server peak RSS MB": 50}},
			"reference":     {{"MB/s": 100, "server peak RSS MB": 100}},
		},
	}
	var b strings.Builder
	targets := []string{"foldstream", "foldstream-pg", "reference"}
	if err := bench.WriteMarkdown(&b, bench.Environment{Rounds: 1}, targets, []bench.Result{res}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| Scenario | Metric | foldstream | foldstream-pg | reference | foldstream/reference | foldstream-pg/reference | foldstream-pg/foldstream |",
		"| catch-up | MB/s (higher is better) | 300 | 240 | 100 | 3.00× | 2.40× | 0.80× |",
		"| catch-up | server peak RSS MB (lower is better) | 40.0 | 50.0 | 100 | 0.40× | 0.50× | 1.25× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
}

func TestWriteMarkdownWithCaddyComparesFoldstreamToBothPeers(t *testing.T) {
	t.Parallel()
	sc := bench.Scenario{Name: "producers", Detail: "d", Metrics: []bench.Metric{{Name: "messages/s", HigherBetter: true}, bench.RetriesMetric}}
	res := bench.Result{
		Scenario: sc,
		Samples: map[string][]bench.Sample{
			"foldstream": {{"messages/s": 400, "409 retries": 0}},
			"reference":  {{"messages/s": 100, "409 retries": 0}},
			"caddy":      {{"messages/s": 80, "409 retries": 5996}},
		},
	}
	var b strings.Builder
	targets := []string{"foldstream", "reference", "caddy"}
	if err := bench.WriteMarkdown(&b, bench.Environment{Rounds: 1, Caddy: "/tmp/caddy"}, targets, []bench.Result{res}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| Scenario | Metric | foldstream | reference | caddy | foldstream/reference | caddy/reference | foldstream/caddy |",
		"| producers | messages/s (higher is better) | 400 | 100 | 80.0 | 4.00× | 0.80× | 5.00× |",
		"| producers | 409 retries (lower is better) | 0.00 | 0.00 | 5,996 |",
		"Official Go server (caddy): /tmp/caddy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
}

func TestCaddyfileBindsLoopbackAndRoutesStreamsToTheFileStore(t *testing.T) {
	t.Parallel()
	conf := bench.CaddyfileFor(4711, "/data/dir", 500*time.Millisecond)
	for _, want := range []string{"admin off", "auto_https off", "http://127.0.0.1:4711 {", "bind 127.0.0.1",
		"route /v1/stream/* {", "durable_streams {", `data_dir "/data/dir"`, "long_poll_timeout 500ms"} {
		if !strings.Contains(conf, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, conf)
		}
	}
}
