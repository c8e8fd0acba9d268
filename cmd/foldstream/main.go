// Command foldstream is foldstream's command-line tool. Each sub-command lives in its own file
// and registers itself in commands from an init function.
//
//	foldstream serve [flags]     run the Durable Streams HTTP server
//	foldstream create|info|delete STREAM, append, read, tail, ls, pause|resume, version
//	foldstream help              list the sub-commands
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/foldstream/foldstream/client"
)

// command is one sub-command.
type command struct {
	// summary is the one-line description shown by "foldstream help".
	summary string
	// run executes the sub-command with the arguments after its name. ctx ends on SIGINT or
	// SIGTERM.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands holds the sub-commands by name; files register theirs in init.
var commands = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "foldstream: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if _, ok := errors.AsType[usageError](err); ok {
			return 2 // the flag package printed the error and the usage
		}
		fmt.Fprint(stderr, redact(fmt.Sprintf("foldstream %s: %v\n", args[0], err)))
		printProblem(stderr, err)
		return 1
	}
	return 0
}

// printProblem prints what a server's problem answer holds beyond its one-line message, one item a
// line under it: each schema violation of a refused batch (with the message's index and the
// value's JSON pointer), how many more there were, and the limit a 413 went over.
func printProblem(w io.Writer, err error) {
	ce, ok := errors.AsType[*client.Error](err)
	if !ok {
		return
	}
	for _, v := range ce.Violations {
		fmt.Fprintf(w, "  message %d at %s: %s\n", v.Index, v.Pointer, oneLine(v.Message))
	}
	if more := ce.ViolationsTotal - len(ce.Violations); more > 0 {
		fmt.Fprintf(w, "  … and %d more violation(s)\n", more)
	}
	if ce.Limit > 0 {
		fmt.Fprintf(w, "  limit: %d %s\n", ce.Limit, ce.LimitUnit)
	}
}

// oneLine replaces the line breaks in s, so that one item prints on one line.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: foldstream <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `run "foldstream <command> -h" for a command's flags`)
}
