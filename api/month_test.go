package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMonthOverHTTP walks a user of New York on billing anchor 31 through
// requests_per_month across the end of a period, through the whole server:
// the month in each answer, the refusal and its wait to the period's end,
// the header fields, the next period (30 April: anchor 31 in a month of
// 30 days), usage and the periods listed.
func TestMonthOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("monthly", `{"requests_per_minute":3,"requests_per_hour":3,"requests_per_day":3,"burst_allowance":0,"requests_per_month":3,"tokens_per_month":1000}`)
	if rec := e.do(http.MethodPut, "/v1/users/ny", `{"tier":"monthly","time_zone":"America/New_York","billing_anchor":31}`, true); rec.Code != http.StatusCreated {
		t.Fatalf("put user: %d %s", rec.Code, rec.Body)
	}
	for _, body := range []string{`{"tier":"monthly","time_zone":"America/New_Yrok"}`, `{"tier":"monthly","billing_anchor":32}`} {
		if rec := e.do(http.MethodPut, "/v1/users/bad", body, true); rec.Code != http.StatusBadRequest ||
			!strings.Contains(rec.Body.String(), strings.Split(strings.Split(body, `,"`)[1], `"`)[0]) {
			t.Errorf("put %s: %d %s, want a 400 naming the field", body, rec.Code, rec.Body)
		}
	}
	// The period began at midnight of 28 February in New York (EST,
	// UTC-5) and ends at midnight of 31 March (EDT, UTC-4): 31 days less
	// the hour clocks sprang forward. One request a day on its last three
	// days, each alone in its day window.
	const month = `"month":{"start":"2026-02-28T00:00:00-05:00","end":"2026-03-31T00:00:00-04:00","limit":3,"remaining":`
	check := `{"context":{"user_id":"ny"},"tokens":100}`
	for i, remaining := range []string{"2", "1", "0"} {
		e.clock.Set(time.Date(2026, 3, 28+i, 2, 0, 0, 0, time.UTC))
		reset := strconv.Itoa(int((74 - 24*i) * 3600)) // to 04:00 UTC on 31 March
		rec := e.do(http.MethodPost, "/v1/check", check, false)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), month+remaining+`,"reset":`+reset+`,"tokens":{"limit":1000,"used":`) {
			t.Fatalf("check %d: %d %s", i, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get("RateLimit-Policy"), `"month";q=3;w=2674800`; !strings.Contains(got, want) {
			t.Errorf("RateLimit-Policy %q, want it to hold %q", got, want)
		}
		if got, want := rec.Header().Get("RateLimit"), `"month";r=`+remaining+`;t=`+reset; !strings.Contains(got, want) {
			t.Errorf("RateLimit %q, want it to hold %q", got, want)
		}
	}
	// 23:00 in New York, the period's last hour.
	e.clock.Set(time.Date(2026, 3, 31, 3, 0, 0, 0, time.UTC))
	rec := e.do(http.MethodPost, "/v1/check", check, false)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"reason":"per-month limit exceeded","retry_after":3600`) ||
		!strings.Contains(rec.Body.String(), month+`0,"reset":3600`) {
		t.Fatalf("the fourth request of 3: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After %q, want 3600", got)
	}
	if got := rec.Header().Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining %q, want the month's 0", got)
	}
	if got := rec.Header().Get("X-RateLimit-Reset"); got != "3600" {
		t.Errorf("X-RateLimit-Reset %q, want the seconds to the period's end", got)
	}

	// At midnight the next period begins, and runs to 30 April.
	e.clock.Set(time.Date(2026, 3, 31, 4, 0, 0, 0, time.UTC))
	rec = e.do(http.MethodPost, "/v1/check", check, false)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"month":{"start":"2026-03-31T00:00:00-04:00","end":"2026-04-30T00:00:00-04:00","limit":3,"remaining":2,"reset":2592000,"tokens":{"limit":1000,"used":100,"remaining":900,"reset":2592000}}`) {
		t.Fatalf("in the next period: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(http.MethodGet, "/v1/usage/ny?tier=monthly", "", true)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"month":{"start":"2026-03-31T00:00:00-04:00","end":"2026-04-30T00:00:00-04:00","count":1,"limit":3,"remaining":2,"reset":2592000,"tokens":{"used":100,"limit":1000,"remaining":900,"reset":2592000}`) {
		t.Fatalf("usage: %d %s", rec.Code, rec.Body)
	}
	// The period before is still in the rows of the day: listed whole.
	rec = e.do(http.MethodGet, "/v1/usage/ny/periods", "", true)
	want := `{"time_zone":"America/New_York","billing_anchor":31,"periods":[` +
		`{"start":"2026-03-31T00:00:00-04:00","end":"2026-04-30T00:00:00-04:00","requests":1,"tokens":100,"cost":"0"},` +
		`{"start":"2026-02-28T00:00:00-05:00","end":"2026-03-31T00:00:00-04:00","requests":3,"tokens":300,"cost":"0"}]}`
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
		t.Fatalf("periods: %d %s\nwant %s", rec.Code, rec.Body, want)
	}
	rec = e.do(http.MethodGet, "/v1/usage/ny/periods?limit=1", "", true)
	if rec.Code != http.StatusOK || strings.Count(rec.Body.String(), `"start"`) != 1 {
		t.Fatalf("periods, limit 1: %d %s", rec.Code, rec.Body)
	}
	// A preview says whose period already passes proposed month limits:
	// ny's 100 tokens pass 99, not 100.
	for limit, want := range map[string]string{"99": `"users_over":1`, "100": `"users_over":0`} {
		rec = e.do(http.MethodPost, "/v1/tiers/monthly/preview", `{"requests_per_minute":3,"requests_per_hour":3,"requests_per_day":3,"burst_allowance":0,"tokens_per_month":`+limit+`}`, true)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("preview with tokens_per_month %s: %d %s, want %s", limit, rec.Code, rec.Body, want)
		}
	}
}
