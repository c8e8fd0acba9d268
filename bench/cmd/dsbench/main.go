// Command dsbench runs foldstream's Durable Streams server and the reference Node server side by
// side on loopback, drives both with the same load, and prints a Markdown table of the medians
// and the ratio foldstream/reference. bench/run.sh builds everything and runs it; see
// docs/bench.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		foldBin     = flag.String("foldstream", "", "built cmd/foldstream binary (empty: skip foldstream)")
		foldArgs    = flag.String("foldstream-args", "", "extra arguments after `foldstream serve ...`, space-separated")
		foldVersion = flag.String("foldstream-version", "", "what the foldstream binary was built from, for the report")
		refDir      = flag.String("refserver", "internal/harness/refserver", "directory holding server.mjs and node_modules (empty: skip the reference)")
		node        = flag.String("node", "node", "node executable")
		rounds      = flag.Int("rounds", 3, "measured rounds per scenario; figures are medians over rounds")
		warmups     = flag.Int("warmup-rounds", 1, "unrecorded rounds per scenario before the measured ones")
		only        = flag.String("only", "", "run only scenarios whose name contains this text")
		quick       = flag.Bool("quick", false, "small sizes, for a smoke test")
		out         = flag.String("out", "", "also write the Markdown report to this file")
		workDir     = flag.String("workdir", "", "directory for the servers' data (default: a fresh temp dir, removed afterwards)")
		lpTimeout   = flag.Duration("long-poll-timeout", 500*time.Millisecond, "both servers' long-poll timeout")
		maxDuration = flag.Duration("max-duration", 15*time.Minute, "stop measuring after this long")
		catchUp     = flag.String("catchup-messages", "", "messages in the catch-up stream, or a comma-separated list for one catch-up scenario per size, e.g. 100000,1000000 (empty: default)")
		catchUpSize = flag.Int("catchup-message-size", 0, "bytes per message of the catch-up streams (0: the default 200); 5000 with 215000 messages makes a 1 GiB stream")
		caddyBin    = flag.String("caddy", "", "also measure the official Go server: a caddy binary built with durable-streams' caddy-plugin (docs/bench.md), as target caddy")
		prodBatches = flag.Int("producer-batches", 0, "batches per producer per measurement (0: the default 200; 1500 makes 600,000 messages with 4 producers of 100)")
		measureFor  = flag.Duration("measure-for", 0, "how long one throughput measurement may issue requests (0: the default 4s)")
		timeout     = flag.Duration("measure-timeout", 0, "hard deadline of one measurement (0: the default 30s)")
		manyStreams = flag.String("many-streams", "", "comma-separated stream counts (e.g. 100,100000) for the many-streams scenarios: creation rate, and plain and producer appends spread over that many streams")
		noSQLite    = flag.Bool("no-sqlite", false, "with -postgres: measure foldstream on PostgreSQL only, without foldstream on SQLite (e.g. to profile the PostgreSQL node alone)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the load generator itself (this process) to this file, and its heap allocations to FILE.allocs")
		traced      = flag.Bool("traced", false, "also measure foldstream on SQLite with every span recorded and exported over OTLP/HTTP to a sink in this process that discards it, as target foldstream-traced (what tracing costs)")
		tracedArgs  = flag.String("traced-args", "", "with -traced: start foldstream-traced with these arguments instead of exporting to the sink, e.g. \"--trace-discard\" with -foldstream dsbench-profserve")
		pgURL       = flag.String("postgres", "", "also measure foldstream on this PostgreSQL URL (a fresh schema is advised: add search_path=NAME), as target foldstream-pg")
	)
	flag.Parse()

	cfg := bench.DefaultConfig()
	if *quick {
		cfg.AppendTotal = 640
		cfg.ProducerBatches = 10
		cfg.CatchUpMessages = 10_000
		cfg.SSEMessages = 50
	}
	if *catchUp != "" {
		for _, f := range strings.Split(*catchUp, ",") {
			n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(f), "_", ""))
			if err != nil || n <= 0 {
				return fmt.Errorf("-catchup-messages: %q is not a positive count", f)
			}
			cfg.CatchUpSizes = append(cfg.CatchUpSizes, n)
		}
	}
	if *catchUpSize > 0 {
		cfg.CatchUpMessageSize = *catchUpSize
	}
	if *prodBatches > 0 {
		cfg.ProducerBatches = *prodBatches
	}
	if *measureFor > 0 {
		cfg.MeasureFor = *measureFor
	}
	if *timeout > 0 {
		cfg.Timeout = *timeout
	}
	if *manyStreams != "" {
		for _, f := range strings.Split(*manyStreams, ",") {
			n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(f), "_", ""))
			if err != nil || n <= 0 {
				return fmt.Errorf("-many-streams: %q is not a positive count", f)
			}
			cfg.ManyStreams = append(cfg.ManyStreams, n)
		}
	}

	if *cpuProfile != "" {
		stop, err := profileSelf(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, *maxDuration)
	defer cancelTimeout()

	dir := *workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "dsbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	// The sink closes after the targets stopped, so the traced server's last export lands.
	var sink *bench.OTLPSink
	defer func() {
		if sink != nil {
			n, b := sink.Received()
			fmt.Fprintf(os.Stderr, "otlp sink: %d exports, %d bytes\n", n, b)
			sink.Close()
		}
	}()
	var targets []*bench.Target
	defer func() {
		for _, t := range targets {
			if err := t.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "dsbench:", err)
			}
		}
	}()
	// startFold starts foldstream as target name, in a work directory of that name, with args
	// after the shared -foldstream-args.
	startFold := func(name string, args ...string) (*bench.Target, error) {
		fdir := filepath.Join(dir, name)
		if err := os.MkdirAll(fdir, 0o755); err != nil {
			return nil, err
		}
		t, err := bench.StartFoldstream(ctx, bench.FoldstreamConfig{
			Bin: *foldBin, ExtraArgs: append(strings.Fields(*foldArgs), args...), Dir: fdir, LongPollTimeout: *lpTimeout,
		})
		if err != nil {
			return nil, err
		}
		t.Name = name
		targets = append(targets, t)
		fmt.Fprintf(os.Stderr, "%s  pid %d at %s\n", name, t.Pid(), t.Base)
		return t, nil
	}
	if *foldBin != "" && !(*noSQLite && *pgURL != "") {
		if _, err := startFold(bench.TargetFoldstream); err != nil {
			return err
		}
	}
	if *foldBin != "" && *pgURL != "" {
		t, err := startFold(bench.TargetFoldstream+"-pg", "--db", *pgURL)
		if err != nil {
			return err
		}
		t.Counters = bench.PostgresCounters(*pgURL)
	}
	if *foldBin != "" && *traced {
		args := strings.Fields(*tracedArgs)
		if len(args) == 0 {
			s, err := bench.StartOTLPSink()
			if err != nil {
				return err
			}
			sink = s
			args = []string{"--otlp-endpoint", sink.URL, "--trace-sample-ratio", "1"}
		}
		if _, err := startFold(bench.TargetFoldstream+"-traced", args...); err != nil {
			return err
		}
	}
	refVersion := "not run"
	if *refDir != "" {
		t, err := bench.StartReference(ctx, bench.ReferenceConfig{
			Node: *node, Dir: *refDir, DataDir: filepath.Join(dir, "reference"), LongPollTimeout: *lpTimeout,
		})
		if err != nil {
			return err
		}
		targets = append(targets, t)
		refVersion = referenceVersion(*refDir)
		fmt.Fprintf(os.Stderr, "reference   pid %d at %s\n", t.Pid(), t.Base)
	}
	if *caddyBin != "" {
		t, err := bench.StartCaddy(ctx, bench.CaddyConfig{Bin: *caddyBin, Dir: filepath.Join(dir, "caddy"), LongPollTimeout: *lpTimeout})
		if err != nil {
			return err
		}
		targets = append(targets, t)
		fmt.Fprintf(os.Stderr, "caddy       pid %d at %s\n", t.Pid(), t.Base)
	}
	if len(targets) == 0 {
		return fmt.Errorf("nothing to measure: give -foldstream, -refserver and/or -caddy")
	}

	var scenarios []bench.Scenario
	runID := "dsb" + strconv.FormatInt(time.Now().Unix(), 36)
	for _, s := range bench.Scenarios(cfg, runID) {
		if strings.Contains(s.Name, *only) {
			scenarios = append(scenarios, s)
		}
	}

	loadBefore := bench.MachineLoad()
	warmUp(ctx, targets, runID)
	started := time.Now()
	results := bench.Run(ctx, targets, scenarios, *warmups, *rounds, os.Stderr)
	fmt.Fprintf(os.Stderr, "measured in %.0fs\n", time.Since(started).Seconds())

	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	fv := *foldVersion
	if *foldBin == "" {
		fv = "not run"
	} else if fv == "" {
		fv = *foldBin
	}
	env := bench.Environment{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		CPUs:       runtime.NumCPU(),
		GoVersion:  runtime.Version(),
		Node:       nodeVersion(*node),
		Reference:  refVersion,
		Foldstream: fv,
		Caddy:      *caddyBin,
		Rounds:     *rounds,
		Warmups:    *warmups,
		Load:       fmt.Sprintf("%s before, %s after", loadBefore, bench.MachineLoad()),
	}
	var buf bytes.Buffer
	if err := bench.WriteMarkdown(&buf, env, names, results); err != nil {
		return err
	}
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// warmUp sends each server a few hundred appends and a read before measuring, so that neither
// pays for first-use costs (JIT compilation in node, page cache, connection setup) in round one.
func warmUp(ctx context.Context, targets []*bench.Target, runID string) {
	for _, t := range targets {
		c := &bench.Client{Base: t.Base, HTTP: bench.NewHTTPClient()}
		name := runID + "-warmup"
		if err := c.Create(ctx, name); err != nil {
			fmt.Fprintf(os.Stderr, "%s warm-up: %v\n", t.Name, err)
			continue
		}
		for i := 0; i < 300; i++ {
			if _, err := c.Append(ctx, name, bench.Message(int64(i), bench.MessageSizeDefault)); err != nil {
				fmt.Fprintf(os.Stderr, "%s warm-up: %v\n", t.Name, err)
				break
			}
		}
		_, _ = c.CatchUp(ctx, name)
		c.HTTP.CloseIdleConnections()
	}
}

func nodeVersion(node string) string {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func referenceVersion(dir string) string {
	f, err := os.Open(filepath.Join(dir, "node_modules", "@durable-streams", "server", "package.json"))
	if err != nil {
		return "@durable-streams/server (version unknown)"
	}
	defer f.Close()
	var pkg struct {
		Version string `json:"version"`
	}
	b, _ := io.ReadAll(f)
	_ = json.Unmarshal(b, &pkg)
	return "@durable-streams/server " + pkg.Version + " (file-backed store)"
}

// profileSelf starts a CPU profile of the load generator into path; the returned function stops
// it and writes the heap's allocation profile to path+".allocs" (go tool pprof -sample_index
// alloc_space): the instrument's own cost, next to the server's.
func profileSelf(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		a, err := os.Create(path + ".allocs")
		if err != nil {
			fmt.Fprintln(os.Stderr, "dsbench:", err)
			return
		}
		defer a.Close()
		if err := pprof.Lookup("allocs").WriteTo(a, 0); err != nil {
			fmt.Fprintln(os.Stderr, "dsbench:", err)
		}
	}, nil
}
