package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// completion prints a shell completion script made from the command
// table: command names, then the subcommands of accounts, campaigns,
// suppress and webhooks, then file names.
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

func writeBashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# qunfa completion for bash: source <(qunfa completion bash)
_qunfa() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  if [[ $COMP_CWORD -eq 2 ]]; then
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
	}
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
