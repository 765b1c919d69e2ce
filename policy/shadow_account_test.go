package policy_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// shadowPoolStore is a memStore that admits members: their pool's history and
// their own decided and recorded together, under the store's one lock.
type shadowPoolStore struct{ *memStore }

func (s shadowPoolStore) AdmitPooled(_ context.Context, poolKey, user string,
	decide func(pool, own policy.History) (policy.Admission, policy.Admission, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pa, ua, err := decide(memCallHistory{s.users[poolKey], s.memStore, poolKey}, memCallHistory{s.users[user], s.memStore, user})
	if err != nil || !pa.Record || !ua.Record {
		return err
	}
	s.users[user] = append(s.users[user], ua.At)
	s.users[poolKey] = append(s.users[poolKey], pa.At)
	return nil
}

// accountBook is an AccountStore in memory.
type accountBook map[string]policy.Account

func (b accountBook) Account(_ context.Context, id string) (policy.Account, error) {
	a, ok := b[id]
	if !ok {
		return a, policy.Errorf(policy.ENOTFOUND, "account %q not found", id)
	}
	return a, nil
}

func (b accountBook) CachedAccount(id string) (policy.Account, bool) {
	a, ok := b[id]
	return a, ok
}

func (b accountBook) Accounts(context.Context, string, int) ([]policy.Account, error) {
	return nil, nil
}

func (b accountBook) PutAccount(_ context.Context, a policy.Account) (bool, error) {
	_, ok := b[a.AccountID]
	b[a.AccountID] = a
	return !ok, nil
}

func (b accountBook) DeleteAccount(_ context.Context, id string) error {
	delete(b, id)
	return nil
}

func (b accountBook) Members(context.Context, string, string, int) ([]policy.UserRecord, error) {
	return nil, nil
}

// reasonCounter is a CheckCounter that keeps every reason counted.
type reasonCounter struct {
	mu      sync.Mutex
	reasons []string
}

func (c *reasonCounter) CountCheck(_ time.Time, _, _, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reasons = append(c.reasons, reason)
}

func (c *reasonCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reasons
	c.reasons = nil
	return r
}

func lim64(v int64) *int64 { return &v }

// poolOf returns pooled limits of requests per minute, hour and day; a
// negative value sets none.
func pooledRequests(perMinute, perHour, perDay int64) *policy.LimitSet {
	var p policy.LimitSet
	for i, v := range []int64{perMinute, perHour, perDay} {
		if v >= 0 {
			f, _ := policy.LimitFieldNamed([]string{"requests_per_minute", "requests_per_hour", "requests_per_day"}[i])
			p.Set(f, lim64(v))
		}
	}
	return &p
}

func TestShadowAccountValidation(t *testing.T) {
	base := policy.Tier{Name: "s", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	tokens := *pooledRequests(-1, -1, -1)
	f, _ := policy.LimitFieldNamed("tokens_per_minute")
	tokens.Set(f, lim64(10))
	negative := *pooledRequests(-1, -1, 100)
	f, _ = policy.LimitFieldNamed("requests_per_hour")
	negative.Set(f, lim64(-2))
	for _, tc := range []struct {
		name    string
		account *policy.LimitSet
		field   string // "" when valid
		message string
	}{
		{"none", nil, "", ""},
		{"no limits", pooledRequests(-1, -1, -1), "", ""},
		{"some limits", pooledRequests(5, -1, 100), "", ""},
		{"negative", &negative, "shadow.account.requests_per_hour", "shadow.account.requests_per_hour must be an integer from 0 to 2147483647"},
		{"cannot bind", pooledRequests(50, 10, -1), "shadow.account.requests_per_hour", "shadow.account.requests_per_hour (10) is below shadow.account.requests_per_minute (50): the hour would refuse first"},
		{"a token limit", &tokens, "shadow.account.tokens_per_minute", "shadow.account.tokens_per_minute cannot be set: only request limits and the burst allowance are replayed and shadowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tier := base
			tier.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}, Account: tc.account}
			errs := tier.ValidateFields()
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("ValidateFields = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Message != tc.message {
				t.Fatalf("ValidateFields = %v, want one problem of %s: %s", errs, tc.field, tc.message)
			}
		})
	}
}

// Promote moves the shadow's pooled limits into the tier's account object,
// keeping its metering limits, and leaves the tier it was given alone.
func TestPromoteShadowAccount(t *testing.T) {
	tokensPerDay, _ := policy.LimitFieldNamed("tokens_per_day")
	rph, _ := policy.LimitFieldNamed("requests_per_hour")
	rpm, _ := policy.LimitFieldNamed("requests_per_minute")
	account := pooledRequests(100, 1000, -1)
	account.Set(tokensPerDay, lim64(5000))
	tier := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Account: account, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Account: pooledRequests(50, -1, -1)}}
	p, err := tier.Promoted()
	if err != nil {
		t.Fatal(err)
	}
	if p.Shadow != nil || p.Limits.Value(policy.RequestsPerMinute) != 5 || p.Account == nil {
		t.Fatalf("promoted %+v", p)
	}
	if got := p.Account.Get(rpm); got == nil || *got != 50 {
		t.Errorf("account requests_per_minute = %v, want the shadow's 50", got)
	}
	if got := p.Account.Get(rph); got != nil {
		t.Errorf("account requests_per_hour = %v, want none, as the shadow has none", *got)
	}
	if got := p.Account.Get(tokensPerDay); got == nil || *got != 5000 {
		t.Errorf("account tokens_per_day = %v, want the tier's 5000 kept", got)
	}
	if got := tier.Account.Get(rpm); *got != 100 {
		t.Errorf("the tier promoted from was changed: requests_per_minute %d", *got)
	}

	// A plan without an account object gains one; shadow limits without
	// pooled ones leave the account object as it was.
	bare := tier
	bare.Account = nil
	if p, _ := bare.Promoted(); p.Account == nil || *p.Account.Get(rpm) != 50 || p.Account.Get(tokensPerDay) != nil {
		t.Errorf("promoted without an account object: %+v", p.Account)
	}
	userOnly := tier
	userOnly.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}}
	if p, _ := userOnly.Promoted(); p.Account != tier.Account {
		t.Errorf("promoted without pooled shadow limits: account %+v, want the tier's", p.Account)
	}
}

// A change of the pooled shadow limits alone is a change of the tier.
func TestSameLimitsShadowAccount(t *testing.T) {
	a := policy.Tier{Name: "t", Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1))}, Account: pooledRequests(5, -1, -1)}}
	b := a
	b.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1))}, Account: pooledRequests(5, -1, -1)}
	if !policy.SameLimits(&a, &b) {
		t.Fatal("equal pooled shadow limits in different allocations differ")
	}
	for name, other := range map[string]*policy.LimitSet{"value": pooledRequests(6, -1, -1), "unset": pooledRequests(-1, -1, -1), "none": nil} {
		b.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1))}, Account: other}
		if policy.SameLimits(&a, &b) {
			t.Errorf("pooled shadow limits of another %s are the same", name)
		}
	}
}

func TestShadowLimitsSummary(t *testing.T) {
	l := policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Account: pooledRequests(50, -1, 5000)}
	if got, want := policy.LimitsSummary(l), "5/min (+0 burst), 100/hour, 1,000/day and account pools 50/min, 5,000/day"; got != want {
		t.Errorf("LimitsSummary = %q, want %q", got, want)
	}
	l.Account = pooledRequests(-1, -1, -1)
	if got := policy.LimitsSummary(l); !strings.HasSuffix(got, " and account pools unlimited") {
		t.Errorf("LimitsSummary of pools without limits = %q", got)
	}
}

// shadowTeam is a plan whose members have room, and whose shadow limits
// are roomy for users but hold each account's pool to two requests a
// minute and four a day.
var shadowTeam = policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Features: []string{"chat"}, Account: pooledRequests(100, -1, -1), Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Account: pooledRequests(2, -1, 4)}}

func newShadowTeam(t *testing.T, tiers ...policy.Tier) (*policy.Service, *policy.TestClock, *reasonCounter, shadowPoolStore) {
	t.Helper()
	st := shadowPoolStore{newMemStore(tiers...)}
	clk := policy.NewTestClock(t0)
	counter := &reasonCounter{}
	// An override of the plan's pooled requests per minute, which shadow
	// limits, as the tier sets them, do not take.
	book := accountBook{"acme": {AccountID: "acme", Tier: "team", Limits: policy.Overrides{0: policy.To(1000)}}}
	// c has a tier of its own, without shadow limits.
	users := newMemUsers(policy.UserRecord{UserID: "c", Tier: "free", Account: "acme"})
	svc := policy.NewService(st.memStore, st, policy.WithClock(clk.Now), policy.WithAccounts(book), policy.WithUsers(users),
		policy.WithStats(nil, counter))
	return svc, clk, counter, st
}

// A member's check is also decided against the pooled shadow limits of
// its account's plan, over the pool's history, and never refused by them:
// the decision's shadow says so in the account's words and the statistics
// count it under shadow_account.
func TestShadowAccountNeverRefuses(t *testing.T) {
	svc, clk, counter, st := newShadowTeam(t, shadowTeam, free)
	ctx := context.Background()
	for i, want := range []struct {
		user, reason string
	}{{"a", ""}, {"b", ""}, {"a", "account per-minute limit exceeded"}, {"b", "account per-minute limit exceeded"}} {
		d, err := svc.Check(ctx, policy.Request{UserID: want.user, Tier: "team", Account: "acme"}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed() || d.Account == nil {
			t.Fatalf("check %d: %+v, want admitted as a member: shadow limits never refuse", i, d)
		}
		if d.Shadow == nil || d.Shadow.Reason() != want.reason || d.Shadow.Allowed != (want.reason == "") || d.Shadow.Account != (want.reason != "") {
			t.Fatalf("check %d: shadow %+v, want reason %q", i, d.Shadow, want.reason)
		}
		counted := counter.take()
		if wantCounted := want.reason != ""; slices.Contains(counted, policy.ShadowAccountReason) != wantCounted {
			t.Fatalf("check %d counted %v; want %s counted: %v", i, counted, policy.ShadowAccountReason, wantCounted)
		}
		clk.Advance(ms)
	}
	if got := st.count(policy.AccountKey("acme")); got != 4 {
		t.Fatalf("the pool recorded %d requests, want all 4", got)
	}
	// A refusal before the rate limiter still carries the pool's verdict.
	d, err := svc.Check(ctx, policy.Request{UserID: "a", Tier: "team", Account: "acme", Feature: "search"}, false)
	if err != nil || d.Allowed() || d.Shadow == nil || d.Shadow.Reason() != "account per-minute limit exceeded" {
		t.Fatalf("denied check: %+v, %v; want the pool's shadow refusal beside the denial", d, err)
	}
	// A user of the plan in no account is decided on the user's shadow
	// limits alone.
	if d, err := svc.Check(ctx, policy.Request{UserID: "solo", Tier: "team"}, false); err != nil || d.Shadow == nil || !d.Shadow.Allowed || d.Shadow.Account {
		t.Fatalf("check outside an account: shadow %+v, %v", d.Shadow, err)
	}
	// The pool's shadow limits are their plan's even for a member whose
	// own tier has none.
	if d, err := svc.Check(ctx, policy.Request{UserID: "c"}, false); err != nil || d.Tier != "free" || d.Shadow == nil || d.Shadow.Reason() != "account per-minute limit exceeded" {
		t.Fatalf("check of a member on a tier without shadow limits: %+v, %v", d, err)
	}
}

// When both the user's shadow limits and the pool's would refuse, the
// shadow's reason is the one that would have made the caller wait longer,
// as a real refusal's is.
func TestShadowAccountOrUser(t *testing.T) {
	team := shadowTeam
	team.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Account: pooledRequests(-1, -1, 3)}
	svc, clk, counter, _ := newShadowTeam(t, team)
	ctx := context.Background()
	check := func(user string) *policy.ShadowDecision {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: "team", Account: "acme"}, false)
		if err != nil || !d.Allowed() || d.Shadow == nil {
			t.Fatalf("check of %s: %+v, %v", user, d, err)
		}
		clk.Advance(ms)
		return d.Shadow
	}
	check("a")
	check("a")
	// a's own shadow minute is full, the pool's day is not.
	if sd := check("a"); sd.Reason() != "per-minute limit exceeded" || sd.Account {
		t.Fatalf("third check of a: %+v, want the user's own shadow refusal", sd)
	}
	// The pool's day is full, b's own shadow is not.
	if sd := check("b"); sd.Reason() != "account per-day limit exceeded" {
		t.Fatalf("check of b: %+v, want the pool's", sd)
	}
	// Both are full: the pool's day waits longer than a's minute.
	if sd := check("a"); sd.Reason() != "account per-day limit exceeded" {
		t.Fatalf("fifth check: %+v, want the pool's, which waits longer", sd)
	}
	if got := counter.take(); !slices.Equal(got[len(got)-2:], []string{policy.CountAdmitted, policy.ShadowAccountReason}) ||
		!slices.Contains(got, policy.ShadowReason(policy.Minute)) {
		t.Fatalf("counted %v", got)
	}
}
