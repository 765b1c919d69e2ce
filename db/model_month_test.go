package db_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// refPeriod is the billing period holding t as the README states it, from
// time.Date alone: local midnight of the anchor day (a shorter month's
// last), to the next month's. The zones below change their clocks at 2
// or 3 in the morning, never at midnight, where time.Date is exact.
func refPeriod(t time.Time, loc *time.Location, anchor int) (start, end time.Time) {
	at := func(y int, m time.Month) time.Time {
		last := time.Date(y, m+1, 0, 0, 0, 0, 0, loc).Day()
		return time.Date(y, m, min(anchor, last), 0, 0, 0, 0, loc)
	}
	local := t.In(loc)
	y, m := local.Year(), local.Month()
	start = at(y, m)
	if t.Before(start) {
		start, end = at(y, m-1), start
	} else {
		end = at(y, m+1)
	}
	return start, end
}

// refMonthUser is a user of TestMonthModel's reference: its cycle, and
// every request admitted and every finished amount of tokens, never
// pruned.
type refMonthUser struct {
	loc      *time.Location
	anchor   int
	admitted []time.Time
	tokens   []struct {
		at time.Time
		n  int64
	}
}

// TestMonthModel runs random sequences of checks, finishes, clock steps of
// a minute to ten days, cleanups and restarts against month limits, for
// users in three zones with daylight-saving changes (Europe/Berlin,
// America/New_York, Australia/Sydney) on anchors 1, 15 and 31, through
// many month ends, against a reference that keeps every request: each
// decision, and the month's count, tokens, start and end it reports, must
// be the reference's.
func TestMonthModel(t *testing.T) {
	const limit, tokenLimit = 6, 400
	eachBackend(t, func(t *testing.T, bk backend) {
		seqs, steps := 12, 120
		if bk.name == "postgres" {
			seqs = 2 // about 4s each here
		}
		if testing.Short() {
			seqs = 1
		}
		ctx := context.Background()
		// What the sequences did, so that a run that never reached a
		// limit or never rolled a row up fails. The month's request limit
		// is the rarer refusal (its tokens usually run out first): when a
		// few sequences have not reached each, more run, up to four times
		// as many.
		var refusedByMonth, refusedByTokens, pruned int64
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		seq := 0
		for ; seq < seqs || seq < 4*seqs && (refusedByMonth == 0 || refusedByTokens == 0 || pruned == 0); seq++ {
			rng := rand.New(rand.NewPCG(seed, uint64(seq)))
			dsn := bk.newDSN(t)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(300 * 24 * time.Hour))))
			var store *db.Store
			var svc *policy.Service
			open := func() {
				s, err := db.Open(ctx, dsn, db.WithSynchronous(db.SyncNormal))
				if err != nil {
					t.Fatal(err)
				}
				store = s
				svc = policy.NewService(s, s, policy.WithUsers(s), policy.WithClock(func() time.Time { return now }))
			}
			open()
			tier := policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(limit)), policy.RequestsPerHour: new(int64(limit)),
				policy.RequestsPerDay: new(int64(limit)), policy.RequestsPerMonth: new(int64(limit)), policy.TokensPerMonth: new(int64(tokenLimit))}}
			if _, _, err := svc.PutTier(ctx, tier); err != nil {
				t.Fatal(err)
			}
			users := map[string]*refMonthUser{}
			var ids []string
			for i, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney"} {
				loc, err := policy.LoadTimeZone(zone)
				if err != nil {
					t.Fatal(err)
				}
				id := zone
				anchor := [...]int{1, 15, 31}[(i+seq)%3]
				if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: id, Tier: "m", TimeZone: zone, BillingAnchor: anchor}); err != nil {
					t.Fatal(err)
				}
				users[id] = &refMonthUser{loc: loc, anchor: anchor}
				ids = append(ids, id)
			}
			for step := range steps {
				switch op := rng.IntN(10); {
				case op < 6: // a check, its call finished at once
					id := ids[rng.IntN(len(ids))]
					u := users[id]
					want := 1 + rng.Int64N(250)
					d, err := svc.Check(ctx, policy.Request{UserID: id, Tokens: want}, false)
					if err != nil {
						t.Fatal(err)
					}
					start, end := refPeriod(now, u.loc, u.anchor)
					var inWindows [3]int64
					var inPeriod, tokens int64
					for _, at := range u.admitted {
						for w, length := range [...]time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
							if at.After(now.Add(-length)) {
								inWindows[w]++
							}
						}
						if !at.Before(start) && at.Before(end) {
							inPeriod++
						}
					}
					for _, f := range u.tokens {
						if !f.at.Before(start) && f.at.Before(end) {
							tokens += f.n
						}
					}
					admit := inWindows[0] < limit && inWindows[1] < limit && inWindows[2] < limit && inPeriod < limit && tokens+want <= tokenLimit
					if d.Allowed() != admit || d.Month == nil || !d.Month.Start.Equal(start) || !d.Month.End.Equal(end) {
						t.Fatalf("seq %d step %d, %s at %v: %+v month %+v; want admitted %v, period %v to %v (%d requests, %d tokens in it)",
							seq, step, id, now, d, d.Month, admit, start, end, inPeriod, tokens)
					}
					switch {
					case admit:
						inPeriod++
						tokens += want
					case d.Reason == "per-month limit exceeded":
						refusedByMonth++
					case d.Reason == "per-month token limit exceeded":
						refusedByTokens++
					}
					if d.Month.Count != inPeriod || d.Month.Tokens == nil || d.Month.Tokens.Used != tokens {
						t.Fatalf("seq %d step %d, %s at %v: month %+v tokens %+v; want %d requests, %d tokens", seq, step, id, now, d.Month, d.Month.Tokens, inPeriod, tokens)
					}
					if admit {
						u.admitted = append(u.admitted, now)
						used := want/2 + rng.Int64N(want/2+1)
						if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: &used}); err != nil {
							t.Fatal(err)
						}
						if used > 0 {
							u.tokens = append(u.tokens, struct {
								at time.Time
								n  int64
							}{now, used})
						}
					}
				case op < 7: // the clock moves: a minute to six hours
					now = now.Add(time.Minute + time.Duration(rng.Int64N(int64(6*time.Hour))))
				case op < 8: // or a day to ten
					now = now.Add(24*time.Hour + time.Duration(rng.Int64N(int64(9*24*time.Hour))))
				case op < 9:
					n, err := store.Prune(ctx, now.Add(-policy.KeepFor))
					if err != nil {
						t.Fatal(err)
					}
					pruned += n
				default:
					store.Close()
					open()
				}
			}
			store.Close()
		}
		t.Logf("%d sequences: %d refusals by the month's requests, %d by its tokens; %d rows rolled up", seq, refusedByMonth, refusedByTokens, pruned)
		if refusedByMonth == 0 || refusedByTokens == 0 || pruned == 0 {
			t.Error("the sequences never reached a month limit of each kind, or never rolled a row up")
		}
	})
}
