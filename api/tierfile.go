package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/policyguard/policyguard/policy"
)

// A tiers file lists tiers as the JSON API shows them, so tier limits can
// live in a repository and be applied from a pipeline:
//
//	{"tiers": [{"name": "free", "requests_per_minute": 10, ...}, ...]}
//
// policyguard tiers export writes one and policyguard tiers import applies
// one. Each tier has the fields of the body of PUT /v1/tiers/{name}, with
// the same rules, plus its name; updated_at is accepted and ignored, so the
// answer of GET /v1/tiers is a tiers file too.
type tierFile struct {
	Tiers []json.RawMessage `json:"tiers"`
}

// fileTier is a tier as a tiers file holds it: the API's fields without
// updated_at, so that a file kept in a repository changes only when a tier
// does.
type fileTier struct {
	Name              string   `json:"name"`
	RequestsPerMinute int64    `json:"requests_per_minute"`
	RequestsPerHour   int64    `json:"requests_per_hour"`
	RequestsPerDay    int64    `json:"requests_per_day"`
	BurstAllowance    int64    `json:"burst_allowance"`
	Features          []string `json:"features"`
	Description       string   `json:"description"`
}

// WriteTiersFile writes tiers to w as a tiers file, ordered by name and
// indented.
func WriteTiersFile(w io.Writer, tiers []policy.Tier) error {
	out := struct {
		Tiers []fileTier `json:"tiers"`
	}{Tiers: make([]fileTier, 0, len(tiers))}
	for _, t := range tiers {
		features := t.Features
		if features == nil {
			features = []string{}
		}
		out.Tiers = append(out.Tiers, fileTier{t.Name, t.RequestsPerMinute, t.RequestsPerHour, t.RequestsPerDay, t.BurstAllowance, features, t.Description})
	}
	slices.SortFunc(out.Tiers, func(a, b fileTier) int { return strings.Compare(a.Name, b.Name) })
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// ReadTiersFile reads a tiers file and checks every tier in it by the rules
// of PUT /v1/tiers/{name}. It returns the tiers in file order, or an
// EINVALID error that lists every problem, one a line, each with the
// position and name of its tier.
func ReadTiersFile(r io.Reader) ([]policy.Tier, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if data = trimJSONSpace(data); len(data) == 0 || data[0] != '{' {
		return nil, policy.Errorf(policy.EINVALID, `not a tiers file: it must be a JSON object, {"tiers": [...]}`)
	}
	var f tierFile
	if err := decodeJSON(bytes.NewReader(data), &f, true); err != nil {
		return nil, policy.Errorf(policy.EINVALID, "not a tiers file: %s", policy.ErrorMessage(err))
	}
	if f.Tiers == nil {
		return nil, policy.Errorf(policy.EINVALID, `not a tiers file: it needs a "tiers" array`)
	}
	var problems []string
	tiers := make([]policy.Tier, 0, len(f.Tiers))
	first := make(map[string]int, len(f.Tiers))
	for i, raw := range f.Tiers {
		t, errs := readFileTier(raw)
		where := fmt.Sprintf("tier %d", i+1)
		if t.Name != "" {
			where += fmt.Sprintf(" (%q)", t.Name)
		}
		for _, e := range errs {
			problems = append(problems, where+": "+e)
		}
		if len(errs) > 0 {
			continue
		}
		if j, dup := first[t.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s: listed twice, first as tier %d", where, j+1))
			continue
		}
		first[t.Name] = i
		tiers = append(tiers, t)
	}
	if len(problems) > 0 {
		return nil, policy.Errorf(policy.EINVALID, "%s", strings.Join(problems, "\n"))
	}
	return tiers, nil
}

// readFileTier reads one entry of a tiers file and returns every problem
// with it. The returned tier carries the entry's name whenever it has one,
// even with problems, to say which entry is wrong.
func readFileTier(raw json.RawMessage) (policy.Tier, []string) {
	if raw = trimJSONSpace(raw); len(raw) == 0 || raw[0] != '{' {
		return policy.Tier{}, []string{"must be a JSON object"}
	}
	// The name first, leniently, so that even an entry the strict reading
	// refuses (an unknown field, say) is named in the report.
	var named struct {
		Name json.RawMessage `json:"name"`
	}
	var name string
	if json.Unmarshal(raw, &named) == nil && json.Unmarshal(named.Name, &name) != nil {
		name = ""
	}
	var in tierInput
	if err := decodeJSON(bytes.NewReader(raw), &in, true); err != nil {
		return policy.Tier{Name: name}, []string{policy.ErrorMessage(err)}
	}
	switch {
	case len(in.Name) == 0:
		return policy.Tier{}, []string{"name is required"}
	case name == "" && !bytes.Equal(in.Name, []byte(`""`)):
		return policy.Tier{}, []string{"name must be a string"}
	}
	return in.tierProblems(name)
}

// DescribeTierChange says what c did in one line, as the import report and
// the admin page word it: "created team: 5/min (+0 burst), 50/hour, 500/day;
// chat", "updated pro: requests_per_minute: 60 → 100", "deleted lesson".
func DescribeTierChange(c policy.TierChange) string {
	switch {
	case c.Created():
		return "created " + c.Tier + ": " + tierSummary(c.New)
	case c.Deleted():
		return "deleted " + c.Tier
	default:
		return "updated " + c.Tier + ": " + strings.Join(tierDiff(c.Old, c.New), "; ")
	}
}
