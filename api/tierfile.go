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
// the same rules, plus its name (a tier's pooled limits for accounts, its
// "account" object, among them); updated_at is accepted and ignored, so the
// answer of GET /v1/tiers is a tiers file too.
//
// A file may also list accounts, as PUT /v1/accounts/{account_id} takes
// them plus their account_id, and user records, as PUT /v1/users/{user_id}
// takes them plus their user_id (their "account" among them); an import
// creates or replaces them, never deletes one. A file without "accounts"
// or "users" is as valid as before:
//
//	{"tiers": [...],
//	 "accounts": [{"account_id": "acme", "tier": "team", "limits": null, "note": ""}],
//	 "users": [{"user_id": "alice", "tier": "pro", "account": "acme", "limits": null, "note": ""}]}
type tierFile struct {
	Tiers    []jsontext.Value `json:"tiers"`
	Accounts []jsontext.Value `json:"accounts,omitempty"`
	Users    []jsontext.Value `json:"users,omitempty"`
}

// TiersFile is what a tiers file holds: its tiers, and the accounts and
// user records it may also list.
type TiersFile struct {
	Tiers    []policy.Tier
	Accounts []policy.Account
	Users    []policy.UserRecord
}

// WriteTiersFile writes tiers, and the user records users, to w as a tiers
// file (see TiersFile.Write).
func WriteTiersFile(w io.Writer, tiers []policy.Tier, users ...policy.UserRecord) error {
	f := TiersFile{Tiers: tiers, Users: users}
	return f.Write(w)
}

// Write writes f to w as a tiers file, tiers ordered by name, accounts by
// account id and records by user id, indented, without updated_at. A file
// without accounts has no "accounts", one without records no "users".
func (f *TiersFile) Write(w io.Writer) error {
	out := tierFile{Tiers: make([]jsontext.Value, 0, len(f.Tiers))}
	// Limits in name order, so that a file changes only when what it
	// lists does.
	deterministic := json.Deterministic(true)
	tiers := slices.SortedFunc(slices.Values(f.Tiers), func(a, b policy.Tier) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range tiers {
		j := tierToJSON(t)
		j.UpdatedAt = time.Time{}
		v, err := json.Marshal(j)
		if err != nil {
			return err
		}
		out.Tiers = append(out.Tiers, v)
	}
	accounts := slices.SortedFunc(slices.Values(f.Accounts), func(a, b policy.Account) int { return strings.Compare(a.AccountID, b.AccountID) })
	for _, a := range accounts {
		j := accountToJSON(&a)
		j.UpdatedAt = time.Time{}
		v, err := json.Marshal(j, deterministic)
		if err != nil {
			return err
		}
		out.Accounts = append(out.Accounts, v)
	}
	users := slices.SortedFunc(slices.Values(f.Users), func(a, b policy.UserRecord) int { return strings.Compare(a.UserID, b.UserID) })
	for _, u := range users {
		j := userToJSON(u)
		j.UpdatedAt = time.Time{}
		v, err := json.Marshal(j, deterministic)
		if err != nil {
			return err
		}
		out.Users = append(out.Users, v)
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
	f, err := ReadTiersFileAll(r)
	return f.Tiers, err
}

// ReadTiersFileAll is ReadTiersFile that also returns the file's accounts,
// each checked by the rules of PUT /v1/accounts/{account_id}, and its user
// records, each checked by the rules of PUT /v1/users/{user_id}, in file
// order. That the tiers and accounts they name exist is checked by the
// import, against the file and the database.
func ReadTiersFileAll(r io.Reader) (TiersFile, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return TiersFile{}, err
	}
	if start := bytes.TrimLeft(data, " \t\r\n"); len(start) == 0 || start[0] != '{' {
		return TiersFile{}, policy.Errorf(policy.EINVALID, `not a tiers file: it must be a JSON object, {"tiers": [...]}`)
	}
	var f tierFile
	if err := unmarshalObject(data, &f, strictOptions); err != nil {
		return TiersFile{}, policy.Errorf(policy.EINVALID, "not a tiers file: %s", policy.ErrorMessage(err))
	}
	if f.Tiers == nil {
		return TiersFile{}, policy.Errorf(policy.EINVALID, `not a tiers file: it needs a "tiers" array`)
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
	accounts := make([]policy.Account, 0, len(f.Accounts))
	firstAccount := make(map[string]int, len(f.Accounts))
	for i, raw := range f.Accounts {
		where := fmt.Sprintf("account %d", i+1)
		if raw.Kind() != '{' {
			problems = append(problems, where+": must be a JSON object")
			continue
		}
		a, err := readAccount(raw, "")
		if a.AccountID != "" {
			where += " (" + policy.Quote(a.AccountID) + ")"
		}
		if err != nil {
			problems = append(problems, where+": "+policy.ErrorMessage(err))
			continue
		}
		if j, dup := firstAccount[a.AccountID]; dup {
			problems = append(problems, fmt.Sprintf("%s: listed twice, first as account %d", where, j+1))
			continue
		}
		firstAccount[a.AccountID] = i
		accounts = append(accounts, a)
	}
	users := make([]policy.UserRecord, 0, len(f.Users))
	firstUser := make(map[string]int, len(f.Users))
	for i, raw := range f.Users {
		where := fmt.Sprintf("user %d", i+1)
		if raw.Kind() != '{' {
			problems = append(problems, where+": must be a JSON object")
			continue
		}
		u, err := readUser(raw, "")
		if u.UserID != "" {
			where += " (" + policy.Quote(u.UserID) + ")"
		}
		if err != nil {
			problems = append(problems, where+": "+policy.ErrorMessage(err))
			continue
		}
		if j, dup := firstUser[u.UserID]; dup {
			problems = append(problems, fmt.Sprintf("%s: listed twice, first as user %d", where, j+1))
			continue
		}
		firstUser[u.UserID] = i
		users = append(users, u)
	}
	if len(problems) > 0 {
		return TiersFile{}, policy.Errorf(policy.EINVALID, "%s", strings.Join(problems, "\n"))
	}
	return TiersFile{Tiers: tiers, Accounts: accounts, Users: users}, nil
}

// DescribeTierChange says what c did in one line, as the import report and
// the admin page word it: "created team: 5/min (+0 burst), 50/hour, 500/day;
// chat", "updated pro: requests_per_minute: 60 → 100", "deleted lesson".
func DescribeTierChange(c policy.TierChange) string {
	switch {
	case c.Created():
		return "created " + c.Tier + ": " + policy.TierSummary(c.New)
	case c.Deleted():
		return "deleted " + c.Tier
	default:
		return "updated " + c.Tier + ": " + strings.Join(policy.TierDiff(c.Old, c.New), "; ")
	}
}
