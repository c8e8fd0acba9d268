package bench_test

import (
	"math"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentileNearestRank(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(100 - i) // 100 ms … 1 ms, unsorted on purpose
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", []time.Duration{ms(7)}, 99, ms(7)},
		{"p50 of 1..100", hundred, 50, ms(50)},
		{"p99 of 1..100", hundred, 99, ms(99)},
		{"p100 of 1..100", hundred, 100, ms(100)},
		{"p1 of 1..100", hundred, 1, ms(1)},
		{"p50 of four", []time.Duration{ms(4), ms(1), ms(3), ms(2)}, 50, ms(2)},
		{"p99 of four is the max", []time.Duration{ms(4), ms(1), ms(3), ms(2)}, 99, ms(4)},
		{"p0 clamps to min", []time.Duration{ms(5), ms(9)}, 0, ms(5)},
		// One slow outlier in 200 samples is p99.5 territory: p99 must not report it.
		{"p99 ignores the single worst of 200", append(repeat(ms(1), 199), ms(500)), 99, ms(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := bench.Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentileDoesNotReorderInput(t *testing.T) {
	t.Parallel()
	in := []time.Duration{ms(3), ms(1), ms(2)}
	bench.Percentile(in, 50)
	if in[0] != ms(3) || in[1] != ms(1) || in[2] != ms(2) {
		t.Errorf("input reordered: %v", in)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 1000, 11, 12, 9}, 11},
	}
	for _, tt := range tests {
		if got := bench.Median(tt.xs); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
	if got := bench.Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	// A real line, with a command name holding a space and a parenthesis.
	stat := "4242 (node (x) y) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 37 0 0 20 0 11 0 123 1000 200 18446744073709551615"
	got, err := bench.ParseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2870 * time.Millisecond; got != want {
		t.Errorf("ParseStatCPU = %v, want %v (250+37 ticks)", got, want)
	}
	if _, err := bench.ParseStatCPU("garbage"); err == nil {
		t.Error("ParseStatCPU(garbage) = nil error, want an error")
	}
}

func TestParseStatusRSSReadsVmRSSInBytes(t *testing.T) {
	t.Parallel()
	status := "Name:\tfoldstream\nVmPeak:\t  900000 kB\nVmRSS:\t   51200 kB\nThreads:\t9\n"
	got, err := bench.ParseStatusRSS(status)
	if err != nil || got != 51200<<10 {
		t.Fatalf("ParseStatusRSS = %d, %v; want %d", got, err, 51200<<10)
	}
	if _, err := bench.ParseStatusRSS("Name:\tx\n"); err == nil {
		t.Fatal("ParseStatusRSS without a VmRSS line: no error")
	}
}
