package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// statsAnswer is the body of GET /v1/stats, as a client reads it.
type statsAnswer struct {
	Period        string    `json:"period"`
	From          time.Time `json:"from"`
	BucketSeconds int64     `json:"bucket_seconds"`
	Tiers         []struct {
		Tier    string `json:"tier"`
		Buckets []struct {
			Start     time.Time        `json:"start"`
			Admitted  int64            `json:"admitted"`
			Refused   int64            `json:"refused"`
			RefusedBy map[string]int64 `json:"refused_by"`
			Shadow    map[string]int64 `json:"shadow_refused"`
		} `json:"buckets"`
	} `json:"tiers"`
}

// tally is what a scripted run's answers said, per bucket start.
type tally map[time.Time]map[string]int64

func (tl tally) add(at time.Time, key string) {
	if tl[at] == nil {
		tl[at] = make(map[string]int64)
	}
	tl[at][key]++
}

// TestStatsMatchCheckAnswers runs a script of checks over three hours of a
// manual clock and compares GET /v1/stats, per minute and per hour, with
// what /v1/check answered: admissions, refusals by the limit named in each
// answer, and the refusals the tier's shadow limits would have made.
func TestStatsMatchCheckAnswers(t *testing.T) {
	e := newEnv(t)
	e.putTier("tight", `{"requests_per_minute":2,"requests_per_hour":5,"requests_per_day":100,"burst_allowance":0,"features":["chat"],`+
		`"shadow":{"requests_per_minute":1,"requests_per_hour":4,"requests_per_day":100,"burst_allowance":0}}`)
	reasons := map[string]string{
		"per-minute limit exceeded": "minute",
		"per-hour limit exceeded":   "hour",
		"per-day limit exceeded":    "day",
	}
	perMinute, perHour := tally{}, tally{}
	check := func(user, feature string) {
		t.Helper()
		body := fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"tight","feature":%q}}`, user, feature)
		rec := e.do("POST", "/v1/check", body, false)
		var d struct {
			Reason *string `json:"reason"`
			Shadow *struct {
				Reason *string `json:"reason"`
			} `json:"shadow"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatalf("check: %v: %s", err, rec.Body)
		}
		key := ""
		switch rec.Code {
		case http.StatusOK:
			key = "admitted"
		case http.StatusForbidden:
			key = "feature"
		case http.StatusTooManyRequests:
			key = reasons[*d.Reason]
		}
		if key == "" {
			t.Fatalf("check answered %d %s", rec.Code, rec.Body)
		}
		now := e.clock.Now().UTC()
		perMinute.add(now.Truncate(time.Minute), key)
		perHour.add(now.Truncate(time.Hour), key)
		if d.Shadow == nil {
			t.Fatalf("check of a tier with shadow limits answered no shadow verdict: %s", rec.Body)
		}
		if r := d.Shadow.Reason; r != nil {
			perMinute.add(now.Truncate(time.Minute), "shadow_"+reasons[*r])
			perHour.add(now.Truncate(time.Hour), "shadow_"+reasons[*r])
		}
	}
	// A dry run is not counted.
	if rec := e.do("POST", "/v1/check?dry_run=true", `{"context":{"user_id":"a","user_tier":"tight"}}`, false); rec.Code != 200 {
		t.Fatalf("dry run: %d", rec.Code)
	}
	for step := range 150 {
		for _, user := range []string{"a", "b", "c"}[:1+step%3] {
			check(user, "chat")
		}
		if step%4 == 0 {
			check("a", "chat")
			check("a", "chat")
		}
		if step%7 == 0 {
			check("a", "search")
		}
		e.clock.Advance(73 * time.Second)
	}
	if err := e.store.FlushCounts(context.Background()); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		period string
		want   tally
	}{{"hour", perMinute}, {"day", perHour}} {
		rec := e.do("GET", "/v1/stats?period="+tc.period, "", true)
		if rec.Code != http.StatusOK {
			t.Fatalf("stats %s: %d %s", tc.period, rec.Code, rec.Body)
		}
		var got statsAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Tiers) != 1 || got.Tiers[0].Tier != "tight" {
			t.Fatalf("stats %s: tiers %+v, want tight alone", tc.period, got.Tiers)
		}
		buckets := got.Tiers[0].Buckets
		if want := map[string]int{"hour": 60, "day": 24}[tc.period]; len(buckets) != want {
			t.Fatalf("stats %s: %d buckets, want %d", tc.period, len(buckets), want)
		}
		seen := 0
		for _, b := range buckets {
			want := tc.want[b.Start]
			if want != nil {
				seen++
			}
			var refused int64
			for k, n := range want {
				if w, ok := strings.CutPrefix(k, "shadow_"); ok {
					if b.Shadow[w] != n {
						t.Errorf("stats %s %s: shadow refused by %s %d, want %d", tc.period, b.Start.Format(time.TimeOnly), w, b.Shadow[w], n)
					}
					continue
				}
				if k != "admitted" {
					refused += n
					if b.RefusedBy[k] != n {
						t.Errorf("stats %s %s: refused by %s %d, want %d", tc.period, b.Start.Format(time.TimeOnly), k, b.RefusedBy[k], n)
					}
				}
			}
			if b.Admitted != want["admitted"] || b.Refused != refused {
				t.Errorf("stats %s %s: admitted %d refused %d, want %d and %d", tc.period, b.Start.Format(time.TimeOnly), b.Admitted, b.Refused, want["admitted"], refused)
			}
		}
		if seen == 0 {
			t.Errorf("stats %s: no bucket had checks", tc.period)
		}
		if tc.period == "day" && seen != len(tc.want) {
			t.Errorf("stats day: %d hours with checks, want %d", seen, len(tc.want))
		}
	}
	// Each kind of answer occurred, so each was compared.
	kinds := map[string]bool{}
	for _, m := range perHour {
		for k := range m {
			kinds[k] = true
		}
	}
	for _, k := range []string{"admitted", "minute", "hour", "feature"} {
		if !kinds[k] {
			t.Errorf("the script produced no %q answer", k)
		}
	}
}

// GET /v1/stats without a period is the last hour; a period given must be
// hour or day, an empty one too.
func TestStatsPeriodDefaultsToHour(t *testing.T) {
	e := newEnv(t)
	if rec := e.do("POST", "/v1/check", `{"context":{"user_id":"a"}}`, false); rec.Code != 200 {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	if err := e.store.FlushCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	hour := e.do("GET", "/v1/stats?period=hour", "", true)
	rec := e.do("GET", "/v1/stats", "", true)
	if rec.Code != http.StatusOK || rec.Body.String() != hour.Body.String() {
		t.Fatalf("without a period: %d %s\nwant the hour's: %s", rec.Code, rec.Body, hour.Body)
	}
	if got := decode[statsAnswer](t, rec); got.Period != "hour" || got.BucketSeconds != 60 || len(got.Tiers) != 1 {
		t.Fatalf("without a period: %+v", got)
	}
	for _, path := range []string{"/v1/stats?period=", "/v1/stats?period=week", "/v1/stats?period=Hour"} {
		if rec := e.do("GET", path, "", true); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"period must be hour or day"`) {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
}
