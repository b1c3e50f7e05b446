package awsrun_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The binaries that read campaigns' time zones embed the zone database
// (time/tzdata): the provided.al2023 Lambda runtime does not promise
// /usr/share/zoneinfo, and without it every zone but UTC fails to load.
func TestZoneBinariesEmbedTzdata(t *testing.T) {
	for _, pkg := range []string{"./functions/api", "./cmd/qunfa"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = repoRoot(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		if !slices.Contains(strings.Fields(string(out)), "time/tzdata") {
			t.Errorf("%s does not import time/tzdata", pkg)
		}
	}
}
