package main

import (
	"context"
	"errors"
)

// runDev is a placeholder until `qunfa dev` is built (cmd/qunfa/dev.go);
// delete this file then.
func runDev(ctx context.Context, args []string) error {
	return errors.New("qunfa dev is not yet built")
}
