package api

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

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
	Tiers []jsontext.Value `json:"tiers"`
}

// WriteTiersFile writes tiers to w as a tiers file, ordered by name and
// indented, without updated_at.
func WriteTiersFile(w io.Writer, tiers []policy.Tier) error {
	out := tierFile{Tiers: make([]jsontext.Value, 0, len(tiers))}
	tiers = slices.SortedFunc(slices.Values(tiers), func(a, b policy.Tier) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range tiers {
		j := tierToJSON(t)
		j.UpdatedAt = time.Time{}
		v, err := json.Marshal(j)
		if err != nil {
			return err
		}
		out.Tiers = append(out.Tiers, v)
	}
	b, err := json.Marshal(out, jsontext.WithIndent("  "))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
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
	if start := bytes.TrimLeft(data, " \t\r\n"); len(start) == 0 || start[0] != '{' {
		return nil, policy.Errorf(policy.EINVALID, `not a tiers file: it must be a JSON object, {"tiers": [...]}`)
	}
	var f tierFile
	if err := unmarshalObject(data, &f, strictOptions); err != nil {
		return nil, policy.Errorf(policy.EINVALID, "not a tiers file: %s", policy.ErrorMessage(err))
	}
	if f.Tiers == nil {
		return nil, policy.Errorf(policy.EINVALID, `not a tiers file: it needs a "tiers" array`)
	}
	var problems []string
	tiers := make([]policy.Tier, 0, len(f.Tiers))
	first := make(map[string]int, len(f.Tiers))
	for i, raw := range f.Tiers {
		var t policy.Tier
		var errs []string
		if raw.Kind() != '{' {
			errs = []string{"must be a JSON object"}
		} else {
			t, errs = readTier(raw, "")
		}
		where := fmt.Sprintf("tier %d", i+1)
		if t.Name != "" {
			where += " (" + policy.Quote(t.Name) + ")"
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
