package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// completion prints a shell completion script made from the command
// table: command names, then the subcommands of accounts, campaigns,
// suppress and webhooks, then each (sub)command's flags, then file names.
func (c *cli) completion(_ context.Context, args []string) error {
	fs := c.newFlagSet("completion")
	pos, err := c.parse(fs, args, 1, "SHELL (bash, zsh or fish)")
	if err != nil {
		return err
	}
	switch pos[0] {
	case "bash":
		writeBashCompletion(c.stdout)
	case "zsh":
		fmt.Fprint(c.stdout, "#compdef qunfa\n# qunfa completion for zsh: source <(qunfa completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBashCompletion(c.stdout)
	case "fish":
		writeFishCompletion(c.stdout)
	default:
		return usagef("no completion for %q: bash, zsh or fish", pos[0])
	}
	return nil
}

// commandNames lists the commands, sorted, with help.
func commandNames() []string {
	names := []string{"help"}
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// commandFlags returns the flags of a command (of its subcommand sub when
// sub is not empty), sorted by name. It learns them from the flag sets the
// command itself makes: it runs the command with -h in a cli that records
// them and writes nowhere, so the completion never drifts from the flags.
func commandFlags(name, sub string) []*flag.Flag {
	cmd, ok := commands[name]
	if !ok {
		return nil
	}
	var sets []*flag.FlagSet
	probe := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		getenv: func(string) string { return "" }, flagSets: &sets}
	args := []string{"-h"}
	if sub != "" {
		args = []string{sub, "-h"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing it might start may run
	_ = cmd.run(probe, ctx, args)
	seen := map[string]*flag.Flag{}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) { seen[f.Name] = f })
	}
	flags := make([]*flag.Flag, 0, len(seen))
	for _, f := range seen {
		flags = append(flags, f)
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	return flags
}

// flagWords are the flags as a completion offers them: --name.
func flagWords(flags []*flag.Flag) string {
	words := make([]string, len(flags))
	for i, f := range flags {
		words[i] = "--" + f.Name
	}
	return strings.Join(words, " ")
}

// isBoolFlag reports a flag that takes no value (--demo, not --rate R).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func writeBashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# qunfa completion for bash: source <(qunfa completion bash)
_qunfa() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  if [[ $COMP_CWORD -eq 2 && $cur != -* ]]; then
    case ${COMP_WORDS[1]} in
`, strings.Join(commandNames(), " "))
	for _, n := range commandNames() {
		if subs := commands[n].subs; len(subs) > 0 {
			fmt.Fprintf(w, "      %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", n, strings.Join(subs, " "))
		}
	}
	fmt.Fprint(w, `      help) COMPREPLY=($(compgen -W "$(qunfa help 2>/dev/null | awk '/^  [a-z]/ {print $1}')" -- "$cur")); return ;;
    esac
  fi
  if [[ $cur == -* ]]; then
    local sub=
    [[ $COMP_CWORD -gt 2 ]] && sub=${COMP_WORDS[2]}
    case "${COMP_WORDS[1]}/$sub" in
`)
	for _, n := range commandNames() {
		cmd, ok := commands[n]
		if !ok {
			continue
		}
		for _, sub := range cmd.subs {
			if flags := commandFlags(n, sub); len(flags) > 0 {
				fmt.Fprintf(w, "      %s/%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", n, sub, flagWords(flags))
			}
		}
		// Without a subcommand, a command with subcommands runs its first.
		if flags := commandFlags(n, ""); len(flags) > 0 {
			fmt.Fprintf(w, "      %s/*) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", n, flagWords(flags))
		}
	}
	fmt.Fprint(w, `    esac
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _qunfa qunfa
`)
}

func writeFishCompletion(w io.Writer) {
	fmt.Fprintln(w, "# qunfa completion for fish: qunfa completion fish | source")
	fmt.Fprintln(w, "complete -c qunfa -f -n __fish_use_subcommand -a help -d 'show the help, or a command'\\''s usage'")
	for _, n := range commandNames() {
		cmd, ok := commands[n]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "complete -c qunfa -f -n __fish_use_subcommand -a %s -d %s\n", n, fishQuote(cmd.summary))
		if len(cmd.subs) > 0 {
			fmt.Fprintf(w, "complete -c qunfa -f -n '__fish_seen_subcommand_from %s' -a %s\n", n, fishQuote(strings.Join(cmd.subs, " ")))
		}
		for _, sub := range cmd.subs {
			writeFishFlags(w, fmt.Sprintf("__fish_seen_subcommand_from %s; and __fish_seen_subcommand_from %s", n, sub), commandFlags(n, sub))
		}
		cond := "__fish_seen_subcommand_from " + n
		if len(cmd.subs) > 0 {
			cond += "; and not __fish_seen_subcommand_from " + strings.Join(cmd.subs, " ")
		}
		writeFishFlags(w, cond, commandFlags(n, ""))
	}
}

// writeFishFlags completes each flag as --name when cond holds; flags that
// take a value require one (-r).
func writeFishFlags(w io.Writer, cond string, flags []*flag.Flag) {
	for _, f := range flags {
		value := " -r"
		if isBoolFlag(f) {
			value = ""
		}
		fmt.Fprintf(w, "complete -c qunfa -n %s -l %s%s -d %s\n", fishQuote(cond), f.Name, value, fishQuote(firstLine(f.Usage)))
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
