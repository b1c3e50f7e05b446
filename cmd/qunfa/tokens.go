package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/qunfa/qunfa/apiclient"
)

func (c *cli) tokens(ctx context.Context, args []string) error {
	return c.group(ctx, "tokens", args, map[string]func(context.Context, []string) error{
		"list": c.tokensList, "create": c.tokensCreate, "revoke": c.tokensRevoke,
	}, "list")
}

func (c *cli) tokensList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("tokens")
	out := outputFlag(fs)
	_, cl, err := c.parseRead(fs, out, args, 0, "")
	if err != nil {
		return err
	}
	resp, err := cl.ListTokensWithResponse(ctx)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(resp.JSON200.Tokens))
		for _, t := range resp.JSON200.Tokens {
			rows = append(rows, []any{t.Id, t.Name, t.Role, shortTime(&t.CreatedAt), shortTime(t.ExpiresAt)})
		}
		table(w, "ID\tNAME\tROLE\tCREATED\tEXPIRES", rows)
	})
}

func (c *cli) tokensCreate(ctx context.Context, args []string) error {
	fs := c.newFlagSet("tokens")
	out := outputFlag(fs)
	name := fs.String("name", "", "what the token is for (shown in the audit log)")
	role := fs.String("role", "", "read, operate or admin")
	expires := fs.Duration("expires-in", 0, "the token stops working after this long (e.g. 720h); 0: never")
	if _, err := c.parse(fs, args, 0, ""); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *name == "" || *role == "" {
		return usagef("give --name and --role (read, operate or admin)")
	}
	if *expires < 0 {
		return usagef("--expires-in must be positive")
	}
	req := apiclient.TokenRequest{Name: *name, Role: apiclient.Role(*role)}
	if *expires > 0 {
		at := time.Now().Add(*expires).UTC()
		req.ExpiresAt = &at
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.CreateTokenWithResponse(ctx, req)
	if err := cl.check(resp, err, http.StatusCreated); err != nil {
		return err
	}
	t := resp.JSON201
	return c.show(*out, resp.Body, func(w io.Writer) {
		fmt.Fprintf(w, "token %s (%s, %s): %s\nshown once: keep it now, it cannot be read back\n", t.Id, t.Name, t.Role, t.Token)
	})
}

func (c *cli) tokensRevoke(ctx context.Context, args []string) error {
	fs := c.newFlagSet("tokens")
	pos, err := c.parse(fs, args, 1, "TOKEN-ID")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.DeleteTokenWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusNoContent); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "token %s revoked: it fails from its next call\n", pos[0])
	return nil
}
