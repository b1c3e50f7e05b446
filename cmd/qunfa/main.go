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

	// The zone database in the binary: campaigns name IANA time zones
	// (qunfa dev fires them), whatever the host has installed.
	_ "time/tzdata"
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
	// flagSets, when not nil, collects every flag set a command makes:
	// shell completion runs each command with -h to learn its flags.
	flagSets *[]*flag.FlagSet
}

// command is one subcommand.
type command struct {
	usage   string // arguments, after the name
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
	// subs are the subcommands of a command that has them (for
	// completion; the first is what the command does without one).
	subs []string
	// read marks commands that take --output table|json.
	read bool
}

// commands are the subcommands by name (filled in init: their run
// functions read this table for usage lines).
var commands map[string]command

func init() {
	commands = map[string]command{
		"dev": {
			usage:   "[--addr 127.0.0.1:8080] [--data-dir .qunfa] [--provider-url URL] [--mock-addr 127.0.0.1:8081] [--demo] [--workers N] ...",
			summary: "run the whole stack locally (API, store, queue, workers, mock provider)",
			run:     func(c *cli, ctx context.Context, args []string) error { return runDev(ctx, args, c.record) },
		},
		"mock-provider": {
			usage:   "--addr ADDR --log FILE [--protocol wecomapi|wecom-app|wechat-mp|http|all] [--rate R] [--burst B] [--silent-drop]",
			summary: "run the mock WeCom provider alone",
			run:     (*cli).mockProvider,
		},
		"openapi": {
			usage:   "[--version 3.1|3.0]",
			summary: "print the OpenAPI description of the API (3.0: the rendering for generators that read only 3.0)",
			run:     (*cli).openapi,
		},
		"submit": {
			usage: "FILE|- [--idempotency-key K] [--canary N | --canary-percent P] [--preview [--output json]]\n" +
				"       qunfa submit --name N --template T --recipients FILE.csv|FILE.ndjson [--key K] [--part-size BYTES] [--canary N] [--preview [--output json]]",
			summary: "submit a job: FILE is the JSON body of POST /v1/jobs (- reads stdin); --recipients uploads a file of any size in parts, resumable with --key, and prints the job id; " +
				"--preview shows what it would send and sends nothing; --canary sends N items first and pauses for approval",
			run: (*cli).submit,
		},
		"status": {
			usage:   "JOB [--output table|json]",
			read:    true,
			summary: "show where a job stands",
			run:     (*cli).status,
		},
		"watch": {
			usage:   "JOB [--strict] [--interval 500ms]",
			summary: "follow a job live (progress per shard, failures by category) until it ends",
			run:     (*cli).watch,
		},
		"jobs": {
			usage:   "[--limit N] [--cursor C] [--output table|json]",
			summary: "list jobs, newest first, a page at a time",
			run:     (*cli).jobs,
			read:    true,
		},
		"items": {
			usage:   "JOB [--status S] [--category C] [--ref R] [--review] [--limit N] [--cursor C] [--output table|json]",
			summary: "list a job's items (recipients), filtered",
			run:     (*cli).items,
			read:    true,
		},
		"redrive": {
			usage:   "JOB --category C",
			summary: "send a job's failed items of one error category again (e.g. exhausted: the dead letters)",
			run:     (*cli).redrive,
		},
		"resolve": {
			usage:   "JOB SEQ delivered|resend",
			summary: "settle an item under review: it was delivered, or send it again",
			run:     (*cli).resolve,
		},
		"limits": {
			usage:   "JOB [--rate R] [--budget B]",
			summary: "change a job's rate cap (messages/s, 0 none) or budget (items, 0 none) while it runs",
			run:     (*cli).limits,
		},
		"accounts": {
			usage: "[list] [--output table|json]\n" +
				"       qunfa accounts get ACCOUNT [--output table|json]\n" +
				"       qunfa accounts put ACCOUNT --rate R [--burst B] [--reserve R] [--max-recipients N]\n" +
				"             [--breaker-failures N] [--breaker-rate F] [--breaker-min-samples N] [--breaker-cooldown SEC]\n" +
				"       qunfa accounts put ACCOUNT --file FILE (the JSON body of PUT /v1/accounts/{account}; flags override it)\n" +
				"       qunfa accounts history ACCOUNT [--output table|json] (the breaker's transitions, newest first)",
			summary: "list, show or set sending accounts and their limits; an account's breaker history",
			run:     (*cli).accounts,
			subs:    []string{"list", "get", "put", "history"},
			read:    true,
		},
		"campaigns": {
			usage: "[list] [--output table|json]\n" +
				"       qunfa campaigns get CAMPAIGN [--output table|json]\n" +
				"       qunfa campaigns create FILE|- [--timezone ZONE] (the JSON body of POST /v1/campaigns)\n" +
				"       qunfa campaigns delete CAMPAIGN",
			summary: "list, show, create or delete scheduled campaigns",
			run:     (*cli).campaigns,
			subs:    []string{"list", "get", "create", "delete"},
			read:    true,
		},
		"suppress": {
			usage: "list [--limit N] [--cursor C] [--output table|json]\n" +
				"       qunfa suppress add ACCOUNT TO [--reason R]\n" +
				"       qunfa suppress remove ACCOUNT TO\n" +
				"       qunfa suppress import FILE|- (CSV with header account,to[,reason]; or JSON {\"entries\": [...]})",
			summary: "the suppression list: recipients never sent to",
			run:     (*cli).suppress,
			subs:    []string{"list", "add", "remove", "import"},
			read:    true,
		},
		"webhooks": {
			usage: "[list] [--output table|json]\n" +
				"       qunfa webhooks create --url URL --event TYPE[,TYPE...] [--secret S] [--kind http|wecom_robot]\n" +
				"       qunfa webhooks delete WEBHOOK\n" +
				"       qunfa webhooks deliveries WEBHOOK [--limit N] [--cursor C] [--output table|json]\n" +
				"       qunfa webhooks redeliver WEBHOOK DELIVERY",
			summary: "endpoints of yours that get job events, or WeCom group robots that get alerts as markdown, and their delivery log",
			run:     (*cli).webhooks,
			subs:    []string{"list", "create", "delete", "deliveries", "redeliver"},
			read:    true,
		},
		"tokens": {
			usage: "[list] [--output table|json]\n" +
				"       qunfa tokens create --name N --role read|operate|admin [--expires-in 720h]\n" +
				"       qunfa tokens revoke TOKEN-ID",
			summary: "your tenant's API tokens (admin): list, create (the secret is shown once), revoke",
			run:     (*cli).tokens,
			subs:    []string{"list", "create", "revoke"},
			read:    true,
		},
		"completion": {
			usage:   "bash|zsh|fish",
			summary: "print a shell completion script (bash: source <(qunfa completion bash))",
			run:     (*cli).completion,
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
		prob *problem
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

Read commands print tables; --output json prints the API's answer instead.

Exit codes: 0 success; 1 failure (the API refused: its problem is printed,
with every field error; server unreachable; a file unreadable); 2 wrong
command line; 3 "watch" saw the job end failed (with --strict: end in any
status but completed).
`, defaultURL)
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
	c.record(fs)
	return fs
}

// record keeps fs when the run collects flag sets (see flagSets).
func (c *cli) record(fs *flag.FlagSet) {
	if c.flagSets != nil {
		*c.flagSets = append(*c.flagSets, fs)
	}
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
