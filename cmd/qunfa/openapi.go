package main

import (
	"context"

	"github.com/qunfa/qunfa/internal/api"
)

// openapi prints the OpenAPI description of the API this binary serves,
// for client generators, without a server.
func (c *cli) openapi(_ context.Context, args []string) error {
	fs := c.newFlagSet("openapi")
	version := fs.String("version", "3.1", "3.1 (the description) or 3.0 (its rendering for generators that read only OpenAPI 3.0)")
	if _, err := c.parse(fs, args, 0, ""); err != nil {
		return err
	}
	switch *version {
	case "3.1":
		_, err := c.stdout.Write(api.OpenAPISpec())
		return err
	case "3.0":
		_, err := c.stdout.Write(api.OpenAPISpec30())
		return err
	}
	return usagef("--version must be 3.1 or 3.0, not %q", *version)
}
