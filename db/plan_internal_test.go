package db

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// TestQueriesReadThroughKeys: on SQLite, no statement of the hot path or
// of the cleanup scans the tables that keep a day of every user's rows
// (EXPLAIN QUERY PLAN shows a SCAN of them), and those on calls use the
// index meant for them: the open calls through calls_open, which stays
// small, a user's finished calls through calls_finished_user, and the
// cleanup's through calls_finished_tier.
func TestQueriesReadThroughKeys(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "plan.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantIndex := map[query]string{
		qOpenCalls:       "calls_open",
		qNextExpiry:      "calls_open",
		qExpiredCalls:    "calls_open",
		qCallNextExpired: "calls_open",
		qCallsForget:     "calls_finished_user",
		qCallsPrune:      "calls_finished_tier",
	}
	for q, text := range sqliteDialect.queries {
		if text == "" || strings.HasPrefix(text, "PRAGMA") {
			continue
		}
		st, err := s.db.PrepareContext(ctx, "EXPLAIN QUERY PLAN "+text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		args := make([]any, numParams(text))
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		st.Close()
		all := strings.Join(plan, "; ")
		for _, d := range plan {
			// A SCAN of one of the tables that keep a day of every
			// user's rows, through an index or not, reads them all.
			for _, table := range []string{"requests", "calls", "call_tokens"} {
				if strings.HasPrefix(d, "SCAN "+table+" ") || d == "SCAN "+table {
					t.Errorf("%q scans %s: %s", text, table, all)
				}
			}
		}
		if idx, ok := wantIndex[query(q)]; ok && !strings.Contains(all, "INDEX "+idx+" ") {
			t.Errorf("%q: want index %s, plan %s", text, idx, all)
		}
	}
}

// numParams returns how many parameters text takes: the highest N of its
// ?N, or the number of its bare ?.
func numParams(text string) int {
	n, bare := 0, 0
	for i := 0; i < len(text); i++ {
		if text[i] != '?' {
			continue
		}
		j := i + 1
		for j < len(text) && unicode.IsDigit(rune(text[j])) {
			j++
		}
		if j == i+1 {
			bare++
			continue
		}
		k := 0
		for _, c := range text[i+1 : j] {
			k = 10*k + int(c-'0')
		}
		n = max(n, k)
	}
	return max(n, bare)
}
