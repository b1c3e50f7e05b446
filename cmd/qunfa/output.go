package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// outputFlag adds --output to a read command: table (for people, the
// default) or json (the API's answer as it came, indented, for scripts).
func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("output", "table", "table or json (the API's answer)")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usagef("--output must be table or json, not %q", o)
	}
	return nil
}

// parseRead parses a read command's flags (out is its --output) and its
// want positional arguments, checks --output and opens the API client.
func (c *cli) parseRead(fs *flag.FlagSet, out *string, args []string, want int, what string) ([]string, *apiClient, error) {
	pos, err := c.parse(fs, args, want, what)
	if err != nil {
		return nil, nil, err
	}
	if err := checkOutput(*out); err != nil {
		return nil, nil, err
	}
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	return pos, cl, nil
}

// show writes an answer as JSON (its body, indented) or as people read it.
func (c *cli) show(output string, body []byte, human func(io.Writer)) error {
	if output == "json" {
		var b bytes.Buffer
		if err := json.Indent(&b, body, "", "  "); err != nil {
			return fmt.Errorf("the API's answer is not JSON: %w", err)
		}
		b.WriteByte('\n')
		_, err := c.stdout.Write(b.Bytes())
		return err
	}
	human(c.stdout)
	return nil
}

// table writes rows under a header, columns aligned.
func table(w io.Writer, header string, rows [][]any) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, v)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// moreHint tells how to read the next page.
func moreHint(w io.Writer, next, again string) {
	if next != "" {
		fmt.Fprintf(w, "more: %s --cursor %s\n", again, next)
	}
}

// shortTime is a time for a table cell: "-" when unset.
func shortTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// pageFlags adds --limit and --cursor to a listing.
func pageFlags(fs *flag.FlagSet) (limit *int64, cursor *string) {
	return fs.Int64("limit", 0, "at most this many per page (0: the API's default)"),
		fs.String("cursor", "", "the page after this cursor (printed under a page that has more)")
}

// ptrIf returns &v unless v is the zero value.
func ptrIf[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
