package cli

import (
	"flag"
	"strings"
	"testing"
)

// Flags may stand before, between or after the other arguments; "--" ends
// them.
func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantRest  string
		wantPrune bool
	}{
		{[]string{"a.json"}, "a.json", false},
		{[]string{"-prune", "a.json"}, "a.json", true},
		{[]string{"a.json", "-prune"}, "a.json", true},
		{[]string{"a.json", "--prune", "b.json"}, "a.json b.json", true},
		{[]string{"a.json", "--", "-prune"}, "a.json -prune", false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		prune := fs.Bool("prune", false, "")
		rest, err := ParseInterspersed(fs, tc.args)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := strings.Join(rest, " "); got != tc.wantRest || *prune != tc.wantPrune {
			t.Errorf("%q: rest %q, prune %v; want %q, %v", tc.args, got, *prune, tc.wantRest, tc.wantPrune)
		}
	}
}
