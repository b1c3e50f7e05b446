package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
)

// TestOpenAPITypeScript runs openapi-typescript (tools/openapi-ts, `make
// openapi-ts`) on the description and on its 3.0 rendering: it must
// generate types without error, and TypeScript (tsc --strict) must accept
// null where an answer carries null. Without node or the package installed
// the test skips loudly; QUNFA_REQUIRE_EMULATORS=1 (CI) makes that a
// failure.
func TestOpenAPITypeScript(t *testing.T) {
	tools, err := filepath.Abs(filepath.Join("..", "..", "tools", "openapi-ts"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tools, "node_modules", ".bin")
	unavailable := func(why string) {
		msg := "OPENAPI-TYPESCRIPT UNAVAILABLE: " + why + " (run `make openapi-ts`; QUNFA_REQUIRE_EMULATORS=1 turns this skip into a failure)"
		if os.Getenv("QUNFA_REQUIRE_EMULATORS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		unavailable("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(bin, "openapi-typescript")); err != nil {
		unavailable("openapi-typescript is not installed in tools/openapi-ts")
	}
	dir := t.TempDir()
	for _, doc := range []struct {
		name string
		spec []byte
	}{{"openapi.json", api.OpenAPISpec()}, {"openapi-3.0.json", api.OpenAPISpec30()}} {
		t.Run(doc.name, func(t *testing.T) {
			in := filepath.Join(dir, doc.name)
			if err := os.WriteFile(in, doc.spec, 0o644); err != nil {
				t.Fatal(err)
			}
			base := strings.TrimSuffix(doc.name, ".json")
			out := filepath.Join(dir, base+".d.ts")
			cmd := exec.Command(filepath.Join(bin, "openapi-typescript"), in, "-o", out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("openapi-typescript %s: %v\n%s", doc.name, err, b)
			}
			types, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				`pause_reason: components["schemas"]["PauseReason"] | null;`,
				`error: components["schemas"]["ItemError"] | null;`,
				`submitJob: {`, `listWebhookDeliveries: {`,
			} {
				if !strings.Contains(string(types), want) {
					t.Errorf("the types of %s lack %s", doc.name, want)
				}
			}
			// The types compile, and null is a value of the nullable keys.
			use := filepath.Join(dir, base+"-use.ts")
			src := `import type { components, operations } from "./` + base + `";
type S = components["schemas"];
const reason: S["Job"]["pause_reason"] = null;
const finished: S["Job"]["finished_at"] = null;
const itemError: S["Item"]["error"] = null;
const rate: S["Job"]["rate_per_sec"] = 0.1;
type Submitted = operations["submitJob"]["responses"][202]["content"]["application/json"];
const id: Submitted["id"] = "j1";
export { reason, finished, itemError, rate, id };
`
			if err := os.WriteFile(use, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			tsc := exec.Command(filepath.Join(bin, "tsc"), "--noEmit", "--strict", "--skipLibCheck", "--target", "es2020",
				"--module", "es2020", "--moduleResolution", "bundler", use)
			if b, err := tsc.CombinedOutput(); err != nil {
				t.Errorf("tsc on the generated types of %s: %v\n%s", doc.name, err, b)
			}
		})
	}
}
