package api_test

import (
	"fmt"

	"github.com/qunfa/qunfa/internal/api"
)

// Provisioning a token stores only its hash, bound to a tenant with
// Store.PutToken(ctx, api.HashToken(token), tenant).
func ExampleHashToken() {
	fmt.Println(api.HashToken("qf_example"))
	// Output: b90c4b88106a2a0f4a2c99da3252a26088137b61ae6f17f215b9ba9483c9a30f
}
