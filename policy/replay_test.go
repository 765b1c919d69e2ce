package policy_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// replayRow is one recorded request: a user and a time in Unix microseconds.
type replayRow struct {
	user string
	at   int64
}

// referenceReplay replays rows as the RateLimiter decides checks: through
// Evaluate on an in-memory History, one request at a time, recording each
// admitted one. It is the definition Replayer must match, figure by figure.
// An account's pool is replayed as a member's check decides it: on the
// tier its pooled limits make (policy.LimitSet.Tier), with the
// account's overrides applied.
func referenceReplay(t *testing.T, rows []replayRow, l policy.RequestLimits, from, to time.Time, override policy.LimitsLookup,
	accounts policy.AccountLookup) policy.Preview {
	t.Helper()
	p := policy.Preview{From: from.UTC(), To: to.UTC(), TopUsers: []policy.UserPreview{}}
	byUser := map[string][]int64{}
	for _, r := range rows {
		if r.at > from.UnixMicro() && r.at <= to.UnixMicro() {
			byUser[r.user] = append(byUser[r.user], r.at)
		}
	}
	var refused []policy.UserPreview
	for user, ats := range byUser {
		lim := l
		if override != nil {
			if o, ok := override(user); ok {
				lim = o
			}
		}
		tier := (&policy.Tier{Name: "ref"}).WithLimits(lim)
		pool := policy.IsAccountKey(user)
		if pool {
			var pooled policy.LimitSet
			if l.Account != nil {
				pooled = *l.Account
			}
			if accounts != nil {
				o, err := accounts(strings.TrimPrefix(user, policy.AccountKeyPrefix))
				if err != nil {
					t.Fatal(err)
				}
				pooled = pooled.WithOverrides(o)
			}
			tier = pooled.Tier("ref", 0)
		}
		var h memHistory
		u := policy.UserPreview{UserID: user}
		for _, at := range ats {
			now := time.UnixMicro(at).UTC()
			ev, err := policy.Evaluate(h, &tier, now)
			if err != nil {
				t.Fatal(err)
			}
			u.Requests++
			if ev.Allowed {
				if !ev.RecordAt.Equal(now) {
					t.Fatalf("reference: recorded at %v, not at %v", ev.RecordAt, now)
				}
				h = append(h, ev.RecordAt)
				continue
			}
			u.Refused++
			if pool {
				p.RefusedByAccount[ev.Blocked]++
			} else {
				p.RefusedBy[ev.Blocked]++
			}
		}
		if pool {
			if u.Refused > 0 {
				p.AccountsRefused++
			}
			continue
		}
		p.Users++
		p.Requests += u.Requests
		if u.Refused > 0 {
			p.UsersRefused++
			p.RequestsRefused += u.Refused
			refused = append(refused, u)
		}
	}
	slices.SortFunc(refused, func(a, b policy.UserPreview) int {
		if a.Refused != b.Refused {
			return int(b.Refused - a.Refused)
		}
		return strings.Compare(a.UserID, b.UserID)
	})
	if len(refused) > policy.MaxTopUsers {
		refused = refused[:policy.MaxTopUsers]
	}
	p.TopUsers = append(p.TopUsers, refused...)
	return p
}

// randomRows returns the rows of users users over the day before to and a
// little before it, grouped by user in time order as the table is read:
// bursts a few milliseconds apart or at one instant, pauses of minutes and
// of hours, and steps of exactly a window.
func randomRows(rng *rand.Rand, users int, to time.Time) []replayRow {
	var rows []replayRow
	for u := range users {
		user := fmt.Sprintf("u%03d", u)
		at := to.Add(-25 * time.Hour).UnixMicro()
		for range rng.IntN(300) {
			switch rng.IntN(10) {
			case 0:
				at += rng.Int64N(int64(3 * time.Hour / time.Microsecond))
			case 1, 2:
				at += rng.Int64N(int64(2 * time.Minute / time.Microsecond))
			case 3:
				// another request at the same instant
			case 4:
				at += []time.Duration{time.Minute, time.Hour}[rng.IntN(2)].Microseconds()
			default:
				at += 1 + rng.Int64N(int64(5*time.Second/time.Microsecond))
			}
			rows = append(rows, replayRow{user, at})
		}
	}
	return rows
}

func replay(t *testing.T, rows []replayRow, l policy.RequestLimits, from, to time.Time, override policy.LimitsLookup,
	accounts ...policy.AccountLookup) policy.Preview {
	t.Helper()
	r := policy.NewReplayer(l, from, to, override)
	for _, a := range accounts {
		r.SetAccounts(a)
	}
	for _, row := range rows {
		if err := r.Add(row.user, row.at); err != nil {
			t.Fatal(err)
		}
	}
	return r.Result()
}

// TestReplayMatchesEvaluate replays random histories through random
// limits and compares every figure with the reference replay.
func TestReplayMatchesEvaluate(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	to := t0.Add(36 * time.Hour)
	from := to.Add(-policy.PreviewWindow)
	for i := range 200 {
		rows := randomRows(rng, 1+rng.IntN(25), to)
		l := policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(rng.Int64N(15))), policy.RequestsPerHour: new(int64(rng.Int64N(120))), policy.RequestsPerDay: new(int64(rng.Int64N(400))), policy.BurstAllowance: new(int64(rng.Int64N(5)))}}
		var override policy.LimitsLookup
		if i%3 == 0 {
			special := policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(rng.Int64N(5))), policy.RequestsPerHour: new(int64(rng.Int64N(50))), policy.RequestsPerDay: new(int64(rng.Int64N(100)))}}
			override = func(user string) (policy.RequestLimits, bool) { return special, strings.HasSuffix(user, "1") }
		}
		got := replay(t, rows, l, from, to, override)
		want := referenceReplay(t, rows, l, from, to, override, nil)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d, case %d, limits %+v:\nreplay    %+v\nreference %+v", seed, i, l, got, want)
		}
	}
}

func TestReplayEdges(t *testing.T) {
	to := t0
	from := to.Add(-policy.PreviewWindow)
	at := func(d time.Duration) int64 { return from.Add(d).UnixMicro() }
	// The row at from is outside, the row at to inside; a zero ceiling
	// refuses everything; the minute frees exactly a minute later.
	const us = time.Microsecond
	rows := []replayRow{{"a", at(0)}, {"a", at(us)}, {"a", at(2 * us)}, {"a", at(time.Minute + us)}, {"a", at(policy.PreviewWindow)}, {"b", at(5 * us)}}
	got := replay(t, rows, policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}}, from, to, nil)
	if got.Users != 2 || got.Requests != 5 || got.RequestsRefused != 1 || got.RefusedBy[policy.Minute] != 1 ||
		len(got.TopUsers) != 1 || got.TopUsers[0] != (policy.UserPreview{UserID: "a", Requests: 4, Refused: 1}) {
		t.Fatalf("preview = %+v", got)
	}
	if got := replay(t, rows, policy.RequestLimits{}, from, to, nil); got.RequestsRefused != 5 || got.UsersRefused != 2 || got.RefusedBy[policy.Minute] != 5 {
		t.Fatalf("zero limits: %+v, want every request refused by the minute", got)
	}
	r := policy.NewReplayer(policy.RequestLimits{}, from, to, nil)
	if err := r.Add("b", at(2*us)); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("b", at(2*us)); err != nil {
		t.Fatalf("a repeated time: %v, want it replayed", err)
	}
	if err := r.Add("b", at(us)); policy.ErrorCode(err) != policy.EINTERNAL {
		t.Fatalf("a time out of order: %v, want EINTERNAL", err)
	}
	if err := r.Add("a", at(3*us)); policy.ErrorCode(err) != policy.EINTERNAL {
		t.Fatalf("a user out of order: %v, want EINTERNAL", err)
	}
}

// randomPools returns the rows of pools accounts' pools as randomRows
// does users', each under its AccountKey: they sort before every user.
func randomPools(rng *rand.Rand, pools int, to time.Time) []replayRow {
	rows := randomRows(rng, pools, to)
	for i := range rows {
		rows[i].user = policy.AccountKey("acct-" + rows[i].user)
	}
	return rows
}

// randomPool returns pooled request limits, each unset one time in three.
func randomPool(rng *rand.Rand) *policy.LimitSet {
	var p policy.LimitSet
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if f.InRequestLimits() && rng.IntN(3) > 0 {
			v := []int64{20, 150, 500}[f.Window]
			if f.Kind == policy.KindBurst {
				v = 5
			}
			p.Set(f, lim64(rng.Int64N(v)))
		}
	}
	return &p
}

// TestReplayPoolsMatchEvaluate replays random pools beside random users
// and compares every figure with the reference: users' figures are as if
// no pool had been replayed, and each pool is decided on its pooled limits
// with its account's overrides.
func TestReplayPoolsMatchEvaluate(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	to := t0.Add(36 * time.Hour)
	from := to.Add(-policy.PreviewWindow)
	for i := range 200 {
		users := randomRows(rng, 1+rng.IntN(10), to)
		rows := append(randomPools(rng, 1+rng.IntN(10), to), users...)
		l := policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(rng.Int64N(15))), policy.RequestsPerHour: new(int64(rng.Int64N(120))), policy.RequestsPerDay: new(int64(rng.Int64N(400)))}}
		if i%4 > 0 {
			l.Account = randomPool(rng)
		}
		var accounts policy.AccountLookup
		if i%2 == 0 {
			special := *randomPool(rng)
			accounts = func(id string) (policy.Overrides, error) {
				var o policy.Overrides
				if strings.HasSuffix(id, "1") {
					for j := range special {
						o[j] = policy.Override{Set: true, Limit: special[j]}
					}
				}
				return o, nil
			}
		}
		got := replay(t, rows, l, from, to, nil, accounts)
		want := referenceReplay(t, rows, l, from, to, nil, accounts)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d, case %d, limits %+v, pool %v:\nreplay    %+v\nreference %+v", seed, i, l, l.Account, got, want)
		}
		alone := replay(t, users, l, from, to, nil)
		alone.AccountsRefused, alone.RefusedByAccount = got.AccountsRefused, got.RefusedByAccount
		if !reflect.DeepEqual(got, alone) {
			t.Fatalf("seed %d, case %d: users' figures with pools %+v, without %+v", seed, i, got, alone)
		}
	}
}

// A pool is never a user, a pool without pooled limits refuses nothing,
// and an account's overrides apply to its pool alone.
func TestReplayPools(t *testing.T) {
	to := t0
	from := to.Add(-policy.PreviewWindow)
	at := func(d time.Duration) int64 { return from.Add(d).UnixMicro() }
	acme, beta := policy.AccountKey("acme"), policy.AccountKey("beta")
	var rows []replayRow
	for _, key := range []string{acme, beta, "u"} {
		for k := range 3 {
			rows = append(rows, replayRow{key, at(time.Duration(k+1) * time.Second)})
		}
	}
	l := policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}}
	got := replay(t, rows, l, from, to, nil)
	if got.Users != 1 || got.Requests != 3 || got.UsersRefused != 0 || len(got.TopUsers) != 0 || got.AccountsRefused != 0 || got.RefusedByAccount != [3]int64{} {
		t.Fatalf("pools without pooled limits: %+v", got)
	}
	l.Account = pooledRequests(-1, -1, 2)
	got = replay(t, rows, l, from, to, nil)
	if got.Users != 1 || got.Requests != 3 || got.RequestsRefused != 0 || got.AccountsRefused != 2 || got.RefusedByAccount != [3]int64{0, 0, 2} {
		t.Fatalf("pools of two a day: %+v", got)
	}
	// beta's record raises its pool's day; acme has none any more.
	lookups := 0
	accounts := func(id string) (policy.Overrides, error) {
		lookups++
		if id == "beta" {
			return policy.Overrides{2: policy.To(10)}, nil
		}
		return policy.Overrides{}, nil
	}
	got = replay(t, rows, l, from, to, nil, accounts)
	if got.AccountsRefused != 1 || got.RefusedByAccount != [3]int64{0, 0, 1} || lookups != 2 {
		t.Fatalf("with beta's override: %+v after %d look-ups, want acme's one refusal and each account read once", got, lookups)
	}
	failed := policy.Errorf(policy.EUNAVAILABLE, "accounts unreadable")
	r := policy.NewReplayer(l, from, to, nil)
	r.SetAccounts(func(string) (policy.Overrides, error) { return policy.Overrides{}, failed })
	if err := r.Add(acme, at(time.Second)); err != failed {
		t.Fatalf("Add with an account that cannot be read: %v, want its error", err)
	}
}
