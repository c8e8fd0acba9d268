package bench

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Environment describes the machine and software a report was measured on.
type Environment struct {
	Date       string
	CPUs       int
	GoVersion  string
	Node       string
	Reference  string // e.g. @durable-streams/server 0.3.7 (file-backed store)
	Foldstream string // e.g. the commit the binary was built from
	Caddy      string // the official Go server's binary, when it ran
	Rounds     int
	Warmups    int
	Load       string // how busy the machine was, e.g. from MachineLoad before and after
}

// WriteMarkdown writes the result table: per scenario and metric the median over the rounds for
// each target and the ratios of RatioPairs (foldstream/reference with two targets), then the
// per-round values and any errors.
func WriteMarkdown(w io.Writer, env Environment, targets []string, results []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Durable Streams side by side: %s\n\n", strings.Join(targets, " vs "))
	fmt.Fprintf(&b, "Measured %s on %d CPUs, %s, node %s; reference: %s; foldstream: %s. ",
		env.Date, env.CPUs, env.GoVersion, env.Node, env.Reference, env.Foldstream)
	if env.Caddy != "" {
		fmt.Fprintf(&b, "Official Go server (caddy): %s, file-backed store. ", env.Caddy)
	}
	fmt.Fprintf(&b, "Each figure is the median of %d measured rounds, after %d unrecorded warm-up round(s); rounds alternate which server goes first. Load generator and servers share the machine.", env.Rounds, env.Warmups)
	if env.Load != "" {
		fmt.Fprintf(&b, " Machine load: %s.", env.Load)
	}
	b.WriteString("\n\n")

	b.WriteString("| Scenario | Metric |")
	for _, t := range targets {
		fmt.Fprintf(&b, " %s |", t)
	}
	pairs := RatioPairs(targets)
	for _, p := range pairs {
		fmt.Fprintf(&b, " %s/%s |", p[0], p[1])
	}
	b.WriteString("\n|---|---|")
	for range targets {
		b.WriteString("---:|")
	}
	for range pairs {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range results {
		for _, m := range r.Metrics() {
			name := m.Name
			if m.HigherBetter {
				name += " (higher is better)"
			} else {
				name += " (lower is better)"
			}
			fmt.Fprintf(&b, "| %s | %s |", r.Scenario.Name, name)
			for _, t := range targets {
				fmt.Fprintf(&b, " %s |", formatValue(r.Median(t, m.Name)))
			}
			for _, p := range pairs {
				fmt.Fprintf(&b, " %s |", formatRatio(r.Median(p[0], m.Name), r.Median(p[1], m.Name)))
			}
			b.WriteString("\n")
		}
	}

	b.WriteString("\n### Scenarios\n\n")
	for _, r := range results {
		fmt.Fprintf(&b, "- **%s**: %s.\n", r.Scenario.Name, r.Scenario.Detail)
	}

	b.WriteString("\n### Every round\n\n| Scenario | Metric | Server | Rounds |\n|---|---|---|---|\n")
	for _, r := range results {
		for _, m := range r.Metrics() {
			for _, t := range targets {
				var vs []string
				for _, s := range r.Samples[t] {
					vs = append(vs, formatValue(s[m.Name]))
				}
				if len(vs) == 0 {
					vs = []string{"—"}
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Scenario.Name, m.Name, t, strings.Join(vs, ", "))
			}
		}
	}

	var errs []string
	for _, r := range results {
		for _, t := range targets {
			for _, e := range r.Errors[t] {
				errs = append(errs, fmt.Sprintf("- %s, %s: %s", r.Scenario.Name, t, e))
			}
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n### Errors\n\nMeasurements that failed are left out of the medians.\n\n")
		b.WriteString(strings.Join(errs, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RatioPairs names the ratio columns of a report: with two targets the first over the second;
// with more, every target over the reference (when one of them is TargetReference), foldstream
// over the official Go server (caddy) when both ran, and foldstream on PostgreSQL over foldstream
// on SQLite when both ran.
func RatioPairs(targets []string) [][2]string {
	if len(targets) == 2 {
		return [][2]string{{targets[0], targets[1]}}
	}
	has := map[string]bool{}
	for _, t := range targets {
		has[t] = true
	}
	var out [][2]string
	if has[TargetReference] {
		for _, t := range targets {
			if t != TargetReference {
				out = append(out, [2]string{t, TargetReference})
			}
		}
	}
	if has[TargetCaddy] && has[TargetFoldstream] {
		out = append(out, [2]string{TargetFoldstream, TargetCaddy})
	}
	if pg := TargetFoldstream + "-pg"; has[pg] && has[TargetFoldstream] {
		out = append(out, [2]string{pg, TargetFoldstream})
	}
	if tr := TargetFoldstream + "-traced"; has[tr] && has[TargetFoldstream] {
		out = append(out, [2]string{tr, TargetFoldstream})
	}
	return out
}

// formatValue prints a figure with three significant digits and thousands separators.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v >= 1000:
		return groupThousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// formatRatio prints a/b as "1.23×", or "—" when either is missing.
func formatRatio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "—"
	}
	r := a / b
	if r >= 10 {
		return strconv.FormatFloat(r, 'f', 1, 64) + "×"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "×"
}

func groupThousands(s string) string {
	n := len(s)
	if n <= 3 {
		return s
	}
	var b strings.Builder
	pre := n % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < n; i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}
