package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/qunfa/qunfa/apiclient"
)

// maxImportEntries is how many entries one POST /v1/suppressions takes;
// suppress import sends a longer file in batches of this size.
const maxImportEntries = 10000

// maxImportBytes bounds a file suppress import reads.
const maxImportBytes = 256 << 20

func (c *cli) suppress(ctx context.Context, args []string) error {
	return c.group(ctx, "suppress", args, map[string]func(context.Context, []string) error{
		"list": c.suppressList, "add": c.suppressAdd, "remove": c.suppressRemove, "import": c.suppressImport,
	}, "")
}

func (c *cli) suppressList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("suppress")
	out := outputFlag(fs)
	limit, cursor := pageFlags(fs)
	_, cl, err := c.parseRead(fs, out, args, 0, "")
	if err != nil {
		return err
	}
	resp, err := cl.ListSuppressionsWithResponse(ctx, &apiclient.ListSuppressionsParams{Cursor: ptrIf(*cursor), Limit: ptrIf(*limit)})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	l := resp.JSON200
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(l.Suppressions))
		for _, s := range l.Suppressions {
			rows = append(rows, []any{s.Account, s.To, orDash(s.Reason), shortTime(&s.CreatedAt)})
		}
		table(w, "ACCOUNT\tTO\tREASON\tADDED", rows)
		moreHint(w, l.NextCursor, "qunfa suppress list")
	})
}

func (c *cli) suppressAdd(ctx context.Context, args []string) error {
	fs := c.newFlagSet("suppress")
	reason := fs.String("reason", "", "why (shown in listings)")
	pos, err := c.parse(fs, args, 2, "ACCOUNT TO")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.SuppressRecipientWithResponse(ctx, pos[0], pos[1], apiclient.SuppressionRequest{Reason: ptrIf(*reason)})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s %s suppressed\n", resp.JSON200.Account, resp.JSON200.To)
	return nil
}

func (c *cli) suppressRemove(ctx context.Context, args []string) error {
	fs := c.newFlagSet("suppress")
	pos, err := c.parse(fs, args, 2, "ACCOUNT TO")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.UnsuppressRecipientWithResponse(ctx, pos[0], pos[1])
	if err := cl.check(resp, err, http.StatusNoContent); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s %s no longer suppressed\n", pos[0], pos[1])
	return nil
}

// suppressImport adds every recipient of a CSV file (header account,to
// and optionally reason) or a JSON file ({"entries": [...]} or a bare
// array of {"account", "to", "reason"}) to the suppression list, in
// batches the API takes.
func (c *cli) suppressImport(ctx context.Context, args []string) error {
	fs := c.newFlagSet("suppress")
	pos, err := c.parse(fs, args, 1, "FILE (.csv or .json; - reads stdin)")
	if err != nil {
		return err
	}
	body, err := c.readInput(pos[0], maxImportBytes)
	if err != nil {
		return err
	}
	entries, err := parseSuppressions(pos[0], body)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var added int64
	for start := 0; start < len(entries); start += maxImportEntries {
		batch := entries[start:min(start+maxImportEntries, len(entries))]
		resp, err := cl.ImportSuppressionsWithResponse(ctx, apiclient.SuppressionImport{Entries: batch})
		if err := cl.check(resp, err, http.StatusOK); err != nil {
			if start > 0 {
				return fmt.Errorf("after %d of %d entries were imported: %w", start, len(entries), err)
			}
			return err
		}
		added += resp.JSON200.Added
	}
	fmt.Fprintf(c.stdout, "%d entries read, %d added to the suppression list\n", len(entries), added)
	return nil
}

// parseSuppressions reads suppression entries from CSV or JSON (JSON when
// the file name ends .json or the content starts with { or [).
func parseSuppressions(name string, body []byte) ([]apiclient.SuppressionEntry, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	var entries []apiclient.SuppressionEntry
	if strings.HasSuffix(name, ".json") || trimmed[0] == '{' || trimmed[0] == '[' {
		var err error
		if trimmed[0] == '[' {
			err = strictJSON(trimmed, &entries)
		} else {
			var imp apiclient.SuppressionImport
			err = strictJSON(trimmed, &imp)
			entries = imp.Entries
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not suppression JSON ({\"entries\": [{\"account\", \"to\", \"reason\"}]}): %w", name, err)
		}
		for i, e := range entries {
			if e.Account == "" || e.To == "" {
				return nil, fmt.Errorf("%s: entry %d needs account and to", name, i+1)
			}
		}
	} else {
		r := csv.NewReader(bytes.NewReader(body))
		r.FieldsPerRecord = -1
		header, err := r.Read()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		col := map[string]int{}
		for i, h := range header {
			col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
		}
		ai, okA := col["account"]
		ti, okT := col["to"]
		ri, okR := col["reason"]
		if !okA || !okT {
			return nil, fmt.Errorf("%s: the CSV header must name the columns account and to (and optionally reason), not %q", name, strings.Join(header, ","))
		}
		for line := 2; ; line++ {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			get := func(i int) string {
				if i < len(rec) {
					return strings.TrimSpace(rec[i])
				}
				return ""
			}
			e := apiclient.SuppressionEntry{Account: get(ai), To: get(ti)}
			if e.Account == "" || e.To == "" {
				return nil, fmt.Errorf("%s line %d: account and to must not be empty", name, line)
			}
			if okR {
				e.Reason = ptrIf(get(ri))
			}
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s has no entries", name)
	}
	return entries, nil
}

// strictJSON decodes JSON refusing unknown fields and trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}
