package api_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// testdata/litellm_model_prices.json is an excerpt of LiteLLM's
// model_prices_and_context_window.json (github.com/BerriAI/litellm, the
// file at the repository's root, commit 00035b69f416be24e2e323c13198d9b7d2d1bdf9): 16 of its
// entries copied verbatim, "sample_spec" and entries of other modes
// (image_generation, image_edit, audio_transcription) among them. The whole
// file is 1.6 MB.
func TestReadPricesFileLiteLLM(t *testing.T) {
	data, err := os.ReadFile("testdata/litellm_model_prices.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := api.ReadPricesFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Format != "litellm" || len(f.Prices) != 10 || f.SkippedTotal() != 6 {
		t.Fatalf("read %s: %d priced, %d skipped (%v); want litellm, 10, 6", f.Format, len(f.Prices), f.SkippedTotal(), f.Skipped)
	}
	for reason, want := range map[string]int{"sample_spec": 1, "mode image_generation": 3, "mode image_edit": 1, "mode audio_transcription": 1} {
		if f.Skipped[reason] != want {
			t.Errorf("skipped %q: %d, want %d", reason, f.Skipped[reason], want)
		}
	}
	table, err := policy.NewPriceTable(f.Prices)
	if err != nil {
		t.Fatal(err)
	}
	// Per token in the file, per million here: 2.5e-07 is $0.25.
	for _, tt := range []struct {
		model                                string
		input, output, cacheRead, cacheWrite string
	}{
		{"claude-3-haiku-20240307", "0.25", "1.25", "0.03", "0.3"},
		{"claude-3-opus-20240229", "15", "75", "1.5", "18.75"},
		{"bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0", "0.8", "4", "0.08", "1"},
		// No cache prices in the file: the input price, as in a body.
		{"chatgpt-4o-latest", "5", "15", "5", "5"},
		{"amazon.nova-2-lite-v1:0", "0.3", "2.5", "0.075", "0.3"},
		{"amazon.nova-lite-v1:0", "0.06", "0.24", "0.06", "0.06"},
	} {
		p, ok := table.Lookup(tt.model, "")
		got := []string{p.Input.String(), p.Output.String(), p.CacheRead.String(), p.CacheWrite.String()}
		want := []string{tt.input, tt.output, tt.cacheRead, tt.cacheWrite}
		if !ok || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %v, %v; want %v", tt.model, got, ok, want)
		}
	}
	for _, skipped := range []string{"sample_spec", "gpt-4o-transcribe-diarize", "256-x-256/dall-e-2"} {
		if _, ok := table.Lookup(skipped, ""); ok {
			t.Errorf("%s was priced", skipped)
		}
	}
	// 1,000 prompt and 500 completion tokens of Claude 3 Haiku, exactly.
	p, _ := table.Lookup("claude-3-haiku-20240307", "")
	if c, err := p.Cost(policy.TokenUsage{Input: 1000, Output: 500}); err != nil || c.String() != "0.000875" {
		t.Errorf("cost = %s, %v; want 0.000875", c, err)
	}
}

func TestReadPricesFileRefuses(t *testing.T) {
	for _, tt := range []struct{ name, file, want string }{
		{"finer than the unit", `{"m": {"mode": "chat", "input_cost_per_token": 1e-19, "output_cost_per_token": 1}}`, `LiteLLM entry "m": input_cost_per_token: 1e-19 is finer than a picodollar per million tokens`},
		{"negative", `{"m": {"mode": "chat", "input_cost_per_token": -1e-6, "output_cost_per_token": 1}}`, "is negative"},
		{"not a number", `{"m": {"mode": "chat", "input_cost_per_token": "1e-6", "output_cost_per_token": 1}}`, `LiteLLM entry "m"`},
		{"too dear", `{"m": {"mode": "chat", "input_cost_per_token": 10, "output_cost_per_token": 1}}`, "is more than"},
		{"our format, bad amount", `{"prices": [{"model": "m", "input": "x", "output": "1"}]}`, `prices[0].input: "x" is not a decimal amount`},
		{"our format, unknown member", `{"prices": [], "version": 2}`, `unknown field "version"`},
		{"not an object", `[]`, "must be a JSON object"},
	} {
		_, err := api.ReadPricesFile([]byte(tt.file))
		if err == nil || !strings.Contains(policy.ErrorMessage(err), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	// An entry of a metered mode without token prices, or with a name the
	// table refuses, is skipped, as one of another mode is.
	f, err := api.ReadPricesFile([]byte(`{"a": {"mode": "chat", "output_cost_per_token": 1e-6}, "b": {"litellm_provider": "x"},
		"` + strings.Repeat("m", 129) + `": {"mode": "chat", "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6},
		"c d": {"mode": "completion", "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6},
		"ok": {"mode": "completion", "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6}}`))
	if err != nil || len(f.Prices) != 1 || f.Skipped["no token prices"] != 1 || f.Skipped["mode none"] != 1 || f.Skipped["unusable model name"] != 2 {
		t.Errorf("skips: %+v, %v", f, err)
	}
}

// A prices file written by WritePricesFile reads back to the same table.
func TestPricesFileRoundTrip(t *testing.T) {
	table, err := policy.NewPriceTable([]policy.Price{
		{Model: "gpt-*", Upstream: "azure", Input: 1, Output: policy.MaxMoney, CacheRead: 3, CacheWrite: 0},
		{Model: "claude-3-haiku", Input: 250_000_000_000, Output: 1_250_000_000_000, CacheRead: 30_000_000_000, CacheWrite: 300_000_000_000},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := api.WritePricesFile(&buf, table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"input": "0.25"`) || !strings.Contains(buf.String(), `"output": "9223372.036854775807"`) {
		t.Errorf("file:\n%s", buf.String())
	}
	f, err := api.ReadPricesFile(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Prices, table.Entries(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || f.Format != "policyguard" {
		t.Errorf("read back %+v, want %+v", got, want)
	}
}
