// Command qunfa is qunfa's one binary for people and scripts: the whole
// stack locally (qunfa dev), the mock provider alone, and a client of the
// HTTP API (submit, status, watch, pause, resume, cancel) that reads
// QUNFA_URL and QUNFA_API_TOKEN from the environment. Run "qunfa help".
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
	"text/tabwriter"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the command failed (API error, unreachable server, I/O)
	exitUsage    = 2 // the command line is wrong
	exitJobNotOK = 3 // watch: the job ended failed (or, with --strict, not completed)
)

// defaultURL is where client commands find the API unless QUNFA_URL says
// otherwise: the address qunfa dev listens on by default.
const defaultURL = "http://127.0.0.1:8080"

// cli is one run of the command: its streams and environment, so tests can
// run commands in-process.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// pollEvery is watch's poll interval (default 500 ms).
	pollEvery time.Duration
	// terminal forces watch's progress-bar mode (default: stdout is a
	// terminal).
	terminal *bool
}

// command is one subcommand.
type command struct {
	usage   string // arguments, after the name
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
}

// commands are the subcommands by name (filled in init: their run
// functions read this table for usage lines).
var commands map[string]command

func init() {
	commands = map[string]command{
		"dev": {
			usage:   "[--addr 127.0.0.1:8080] [--data-dir .qunfa] [--provider-url URL] [--mock-addr 127.0.0.1:8081] [--demo] [--workers N] ...",
			summary: "run the whole stack locally (API, store, queue, workers, mock provider)",
			run:     func(_ *cli, ctx context.Context, args []string) error { return runDev(ctx, args) },
		},
		"mock-provider": {
			usage:   "--addr ADDR --log FILE [--rate R] [--burst B] [--silent-drop]",
			summary: "run the mock WeCom provider alone",
			run:     (*cli).mockProvider,
		},
		"openapi": {
			usage:   "[--version 3.1|3.0]",
			summary: "print the OpenAPI description of the API (3.0: the rendering for generators that read only 3.0)",
			run:     (*cli).openapi,
		},
		"submit": {
			usage:   "FILE|- [--idempotency-key K]",
			summary: "submit a job (FILE is the JSON body of POST /v1/jobs; - reads stdin)",
			run:     (*cli).submit,
		},
		"status": {
			usage:   "JOB [--json]",
			summary: "show where a job stands",
			run:     (*cli).status,
		},
		"watch": {
			usage:   "JOB [--strict] [--interval 500ms]",
			summary: "follow a job live (progress per shard, failures by category) until it ends",
			run:     (*cli).watch,
		},
		"pause": {
			usage:   "JOB",
			summary: "pause a running job (resumable)",
			run:     func(c *cli, ctx context.Context, args []string) error { return c.jobCommand(ctx, "pause", args) },
		},
		"resume": {
			usage:   "JOB",
			summary: "resume a paused job",
			run:     func(c *cli, ctx context.Context, args []string) error { return c.jobCommand(ctx, "resume", args) },
		},
		"cancel": {
			usage:   "JOB",
			summary: "cancel a job: its remaining items are abandoned, irreversibly",
			run:     func(c *cli, ctx context.Context, args []string) error { return c.jobCommand(ctx, "cancel", args) },
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := (&cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}).run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// usageError is a wrong command line; it exits 2 with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitError ends the command with a code and, unless empty, a message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// run runs one command line and returns the exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.help(c.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if cmd, ok := commands[rest[0]]; ok {
				fmt.Fprintf(c.stdout, "usage: qunfa %s %s\n\n%s\n", rest[0], cmd.usage, cmd.summary)
				return exitOK
			}
		}
		c.help(c.stdout)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(c.stderr, "qunfa: unknown command %q\n\n", name)
		c.help(c.stderr)
		return exitUsage
	}
	err := cmd.run(c, ctx, rest)
	var (
		uerr *usageError
		xerr *exitError
		prob *api.Problem
	)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(c.stderr, "qunfa %s: %s\nusage: qunfa %s %s\n", name, uerr.msg, name, cmd.usage)
		return exitUsage
	case errors.As(err, &xerr):
		if xerr.msg != "" {
			fmt.Fprintf(c.stderr, "qunfa %s: %s\n", name, xerr.msg)
		}
		return xerr.code
	case errors.As(err, &prob):
		printProblem(c.stderr, name, prob)
		return exitFailure
	default:
		fmt.Fprintf(c.stderr, "qunfa %s: %v\n", name, err)
		return exitFailure
	}
}

func (c *cli) help(w io.Writer) {
	fmt.Fprint(w, `qunfa delivers bulk messages exactly once, never over an account's rate.

usage: qunfa COMMAND [ARGUMENTS]

commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%s\n", n, commands[n].summary)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tshow this help, or a command's usage\n")
	_ = tw.Flush()
	fmt.Fprintf(w, `
Client commands talk to the API at $QUNFA_URL (default %s) with the
token in $QUNFA_API_TOKEN ("qunfa dev" prints one when it makes it).

Exit codes: 0 success; 1 failure (API error, server unreachable); 2 wrong
command line; 3 "watch" saw the job end failed (with --strict: end in any
status but completed).
`, defaultURL)
}

// printProblem writes an API problem readably.
func printProblem(w io.Writer, cmd string, p *api.Problem) {
	fmt.Fprintf(w, "qunfa %s: %s (HTTP %d)", cmd, p.Title, p.Status)
	if p.Detail != "" {
		fmt.Fprintf(w, ": %s", p.Detail)
	}
	fmt.Fprintln(w)
	for _, f := range p.Errors {
		fmt.Fprintf(w, "  %s: %s\n", f.Field, f.Message)
	}
}

// parseFlags parses flags that may come before, between or after the
// positional arguments, and returns the positional ones.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newFlagSet returns a flag set that reports errors, not exits.
func (c *cli) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("qunfa "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: qunfa %s %s\n", name, commands[name].usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a command's flags and checks its positional argument count.
func (c *cli) parse(fs *flag.FlagSet, args []string, want int, what string) ([]string, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &exitError{code: exitUsage} // flag printed the problem and usage
	}
	if len(pos) != want {
		if len(pos) < want {
			return nil, usagef("missing %s", what)
		}
		return nil, usagef("unexpected arguments: %s", strings.Join(pos[want:], " "))
	}
	return pos, nil
}

// client returns an API client from the environment.
func (c *cli) client() (*api.Client, error) {
	base := strings.TrimSpace(c.getenv("QUNFA_URL"))
	if base == "" {
		base = defaultURL
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("QUNFA_URL %q must start with http:// or https://", base)
	}
	token := strings.TrimSpace(c.getenv("QUNFA_API_TOKEN"))
	if token == "" {
		return nil, errors.New("QUNFA_API_TOKEN is not set: export the API token (qunfa dev prints one at start)")
	}
	return api.NewClient(base, token), nil
}
