package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// pricesCmd runs "policyguard prices args..." with env as the environment.
func pricesCmd(env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), append([]string{"prices"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return out.String(), errOut.String(), err
}

// LiteLLM's price file (an excerpt of real entries: see
// api/pricefile_test.go) imports into the database of a running service,
// which answers the new version on its API at once; the import counts
// what it skipped, and export writes the table back as the service's own
// file, which imports again as a version that changes nothing.
func TestPricesImportLiteLLMIntoRunningService(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "guardrail.db")
	url, stop := startInProcess(t, dbPath)
	defer stop()
	env := map[string]string{"GUARDRAIL_DB": dbPath}

	if _, _, err := pricesCmd(env, "export"); err == nil || !strings.Contains(err.Error(), "no price version is in force") {
		t.Fatalf("export before any version: %v", err)
	}
	out, _, err := pricesCmd(env, "import", "api/testdata/litellm_model_prices.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"added claude-3-haiku-20240307: input 0.25, output 1.25, cache_read 0.03, cache_write 0.3\n",
		"LiteLLM file: 10 entries priced, 6 skipped (1 mode audio_transcription, 1 mode image_edit, 3 mode image_generation, 1 sample_spec)\n",
		"version 1 of 10 entries, in force from ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("import said:\n%s\nwant a line with %q", out, want)
		}
	}
	body := mustCall(t, "GET", url+"/v1/prices", "", 200)
	for _, want := range []string{
		`"source":"import"`,
		`{"model":"claude-3-opus-20240229","input":"15","output":"75","cache_read":"1.5","cache_write":"18.75"}`,
		`{"model":"amazon.nova-lite-v1:0","input":"0.06","output":"0.24","cache_read":"0.06","cache_write":"0.06"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /v1/prices lacks %s:\n%.600s", want, body)
		}
	}

	exported, _, err := pricesCmd(env, "export")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(exported, `"model": "claude-3-haiku-20240307"`) || strings.Contains(exported, "effective_from") {
		t.Fatalf("export:\n%.400s", exported)
	}
	file := writeFile(t, "prices.json", exported)
	out, _, err = pricesCmd(env, "import", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "no change\nversion 2 of 10 entries") {
		t.Errorf("importing the export said:\n%s", out)
	}

	bad := writeFile(t, "bad.json", `{"prices": [{"model": "m", "input": "1", "output": "1"}, {"model": "m", "input": "2", "output": "2"}]}`)
	if _, _, err := pricesCmd(env, "import", bad); err == nil || !strings.Contains(err.Error(), `nothing imported: prices[1].model lists "m" again`) {
		t.Errorf("a bad file: %v", err)
	}
	if _, _, err := pricesCmd(env, "import", "-effective-from", "2000-01-01T00:00:00Z", file); err == nil || !strings.Contains(err.Error(), "is before now") {
		t.Errorf("a version beginning in the past: %v", err)
	}
	if got := mustCall(t, "GET", url+"/v1/prices/versions", "", 200); strings.Count(got, `"id"`) != 2 {
		t.Errorf("versions after two refused imports: %s", got)
	}
}
