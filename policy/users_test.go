package policy_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// memUsers is a UserStore in memory whose cache (what CachedUser answers)
// may lag behind its records, as a store's memory lags behind another
// process.
type memUsers struct {
	mu      sync.Mutex
	records map[string]policy.UserRecord
	cached  map[string]policy.UserRecord
	reads   int // calls of User, which reads storage
}

func newMemUsers(records ...policy.UserRecord) *memUsers {
	u := &memUsers{records: map[string]policy.UserRecord{}, cached: map[string]policy.UserRecord{}}
	for _, r := range records {
		u.records[r.UserID], u.cached[r.UserID] = r, r
	}
	return u
}

func (u *memUsers) User(_ context.Context, id string) (policy.UserRecord, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reads++
	r, ok := u.records[id]
	if !ok {
		return r, policy.Errorf(policy.ENOTFOUND, "user %q has no record", id)
	}
	return r, nil
}

func (u *memUsers) CachedUser(id string) (policy.UserRecord, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.cached[id]
	return r, ok
}

func (u *memUsers) Users(context.Context, string, int) ([]policy.UserRecord, error) { return nil, nil }

func (u *memUsers) UpdateUsers(_ context.Context, up policy.UserUpdate) ([]policy.UserChange, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var changes []policy.UserChange
	for _, r := range up.Put {
		r.UpdatedAt = up.At
		u.records[r.UserID], u.cached[r.UserID] = r, r
		changes = append(changes, policy.UserChange{UserID: r.UserID, New: &r})
	}
	for _, id := range up.Delete {
		delete(u.records, id)
		delete(u.cached, id)
		changes = append(changes, policy.UserChange{UserID: id})
	}
	return changes, nil
}

func (u *memUsers) UserChanges(context.Context, string, int) ([]policy.UserChange, error) {
	return nil, nil
}

// userStore is a memStore whose histories confirm user records as they
// stand in users (and tiers as memStore keeps them).
type userStore struct {
	*memStore
	users *memUsers
}

func (s *userStore) Admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	return s.memStore.Admit(ctx, user, func(h policy.History) (policy.Admission, error) {
		return decide(userHistory{confirmingHistory{h, s.memStore}, s.users})
	})
}

type userHistory struct {
	confirmingHistory
	users *memUsers
}

// Calls passes the ledger of memStore's history through.
func (h userHistory) Calls(now time.Time) (policy.Ledger, error) {
	return h.History.(policy.CallHistory).Calls(now)
}

func (h userHistory) CurrentUser(id string) (*policy.UserRecord, bool, error) {
	h.users.mu.Lock()
	defer h.users.mu.Unlock()
	r, ok := h.users.records[id]
	return &r, ok, nil
}

var (
	basic = policy.Tier{Name: "basic", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"chat"}}
	gold  = policy.Tier{Name: "gold", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500)), policy.BurstAllowance: new(int64(1)), policy.TokensPerDay: i64(1000), policy.MaxConcurrent: i64(2)}, Features: []string{"*"}}
)

// The tier a check is decided under: the assignment first, then the
// check's own tier if believed, then the default; overrides apply to it.
func TestEffectiveTier(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rec       *policy.UserRecord
		requested string
		trust     bool
		wantTier  string
		wantMin   int64 // the minute window's limit
	}{
		{"no record, trusted", nil, "gold", true, "gold", 6},
		{"no record, not trusted", nil, "gold", false, "basic", 1},
		{"no record, none named", nil, "", true, "basic", 1},
		{"assigned beats the named tier", &policy.UserRecord{UserID: "u", Tier: "gold"}, "basic", true, "gold", 6},
		{"assigned, not trusted", &policy.UserRecord{UserID: "u", Tier: "gold"}, "basic", false, "gold", 6},
		{"overrides only, on the named tier", &policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(9)}}, "gold", true, "gold", 10},
		{"overrides only, not trusted", &policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.BurstAllowance: policy.To(4)}}, "gold", false, "basic", 5},
		{"assigned with overrides", &policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(0), policy.BurstAllowance: policy.To(0)}}, "", true, "gold", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			users := newMemUsers()
			if tc.rec != nil {
				users = newMemUsers(*tc.rec)
			}
			s := &userStore{newMemStore(basic, gold), users}
			svc := policy.NewService(s, s, policy.WithDefaultTier("basic"), policy.WithUsers(users),
				policy.WithTrustClientTier(tc.trust), policy.WithClock(func() time.Time { return t0 }))
			for _, dry := range []bool{true, false} {
				d, err := svc.Check(context.Background(), policy.Request{UserID: "u", Tier: tc.requested}, dry)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Tier, tc.wantTier; got != want {
					t.Errorf("dry %v: tier %q, want %q", dry, got, want)
				}
				if got, want := d.Windows[policy.Minute].Limit, tc.wantMin; got != want {
					t.Errorf("dry %v: minute limit %d, want %d", dry, got, want)
				}
			}
		})
	}
}

// Overrides replace the tier's values field by field; the rest, features
// included, stay the tier's, and a removed optional limit is no limit.
func TestWithOverrides(t *testing.T) {
	got := gold.WithOverrides(policy.Overrides{policy.RequestsPerHour: policy.To(7), policy.TokensPerDay: policy.Unlimited, policy.TokensPerMinute: policy.To(30), policy.MaxConcurrent: policy.Override{}})
	want := gold
	want.Limits[policy.RequestsPerHour] = new(int64(7))
	want.Limits[policy.TokensPerDay] = nil
	want.Limits[policy.TokensPerMinute] = i64(30)
	if !policy.SameLimits(&got, &want) || got.Name != "gold" {
		t.Fatalf("WithOverrides = %+v, want %+v", got, want)
	}
	if same := gold.WithOverrides(policy.Overrides{}); !policy.SameLimits(&same, &gold) {
		t.Fatalf("no overrides changed the tier: %+v", same)
	}
	if *gold.Limits[policy.TokensPerDay] != 1000 {
		t.Fatal("WithOverrides changed the tier it was called on")
	}
}

// A limit out of range is refused with the tier's message; null is refused
// only for the request limits.
func TestUserRecordValidation(t *testing.T) {
	for _, tc := range []struct {
		rec  policy.UserRecord
		want string
	}{
		{policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerDay: policy.To(-1)}}, "requests_per_day must be an integer from 0 to 2147483647"},
		{policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.MaxConcurrent: policy.To(policy.MaxLimit + 1)}}, "max_concurrent must be an integer from 0 to 2147483647"},
		{policy.UserRecord{UserID: "u", Tier: "No Such"}, "tier must be null or match"},
		{policy.UserRecord{UserID: ""}, "user_id must not be empty"},
		{policy.UserRecord{UserID: "u", Note: strings.Repeat("x", policy.MaxNote+1)}, "note must be at most 1024 bytes"},
		{policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.TokensPerHour: policy.Unlimited}}, ""},
	} {
		err := tc.rec.Validate()
		if got := policy.ErrorMessage(err); err != nil && !strings.Contains(got, tc.want) || err == nil && tc.want != "" {
			t.Errorf("%+v: %v, want %q", tc.rec, err, tc.want)
		}
	}
	if _, err := policy.LimitsOf(map[string]*int64{"requests_per_minute": nil}); policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("null requests_per_minute: %v", err)
	}
	if _, err := policy.LimitsOf(map[string]*int64{"rpm": i64(1)}); err == nil || !strings.Contains(err.Error(), `unknown field "rpm"`) {
		t.Errorf("unknown limit: %v", err)
	}
	l := policy.Overrides{policy.RequestsPerMinute: policy.To(1), policy.TokensPerDay: policy.Unlimited, policy.MaxConcurrent: policy.To(3)}
	back, err := policy.LimitsOf(l.Values())
	if err != nil || !back.Equal(&l) {
		t.Errorf("LimitsOf(Values()) = %+v, %v, want %+v", back, err, l)
	}
}

// A recording check takes the record from memory; when memory lags behind
// the stored record (another process changed it), the admission's
// confirmation catches it and the check is decided on the record as stored,
// here and for a check refused before the rate limiter.
func TestRecordingCheckConfirmsCachedRecord(t *testing.T) {
	ctx := context.Background()
	users := newMemUsers()
	s := &userStore{newMemStore(basic, gold), users}
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(s, s, policy.WithDefaultTier("basic"), policy.WithUsers(users), policy.WithClock(clk.Now))
	check := func(feature string) policy.Decision {
		t.Helper()
		clk.Advance(time.Second)
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "basic", Feature: feature}, false)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := check(""); d.Tier != "basic" || users.reads != 0 {
		t.Fatalf("no record: %+v after %d reads, want basic from memory", d, users.reads)
	}
	// Another process assigns gold: only storage knows.
	users.mu.Lock()
	users.records["u"] = policy.UserRecord{UserID: "u", Tier: "gold"}
	users.mu.Unlock()
	if d := check("chat"); d.Tier != "gold" || !d.Allowed() || users.reads != 1 {
		t.Fatalf("after the assignment: %+v after %d reads, want gold after one read", d, users.reads)
	}
	// Refused before the rate limiter: confirmed by reading the record.
	if d := check("search"); d.Tier != "gold" || !d.Allowed() {
		t.Fatalf("search after the assignment: %+v, want gold admitting it", d)
	}
	// The record is removed elsewhere while memory still holds gold at
	// 0/min, which would refuse.
	users.mu.Lock()
	delete(users.records, "u")
	users.cached["u"] = policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(0), policy.BurstAllowance: policy.To(0)}}
	users.mu.Unlock()
	if d := check("chat"); d.Tier != "basic" {
		t.Fatalf("after the removal: %+v, want basic", d)
	}
}

// A check refused before the rate limiter on a cached record is confirmed
// by reading the record: a stale assignment never refuses.
func TestRefusalOnCachedRecordIsConfirmed(t *testing.T) {
	users := newMemUsers()
	users.cached["u"] = policy.UserRecord{UserID: "u", Tier: "basic"} // stored: none
	s := &userStore{newMemStore(basic, gold), users}
	svc := policy.NewService(s, s, policy.WithDefaultTier("basic"), policy.WithUsers(users), policy.WithClock(func() time.Time { return t0 }))
	d, err := svc.Check(context.Background(), policy.Request{UserID: "u", Tier: "gold", Feature: "search"}, false)
	if err != nil || d.Tier != "gold" || !d.Allowed() {
		t.Fatalf("check: %+v, %v, want gold admitting search", d, err)
	}
}

// Forget deletes requests, not the record.
func TestServiceUserRecords(t *testing.T) {
	ctx := policy.WithChangeSource(context.Background(), policy.SourceAdmin)
	users := newMemUsers()
	s := &userStore{newMemStore(basic, gold), users}
	svc := policy.NewService(s, s, policy.WithUsers(users), policy.WithClock(func() time.Time { return t0 }))
	if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(-5)}}); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("bad limit: %v", err)
	}
	r, created, err := svc.PutUser(ctx, policy.UserRecord{UserID: "u", Tier: "gold"})
	if err != nil || !created || !r.UpdatedAt.Equal(t0) {
		t.Fatalf("PutUser = %+v, %v, %v", r, created, err)
	}
	if err := svc.Forget(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.User(ctx, "u"); err != nil {
		t.Fatalf("record after Forget: %v", err)
	}
	if err := svc.DeleteUser(ctx, ""); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("empty id: %v", err)
	}
	bare := policy.NewService(s, s)
	if _, err := bare.User(ctx, "u"); policy.ErrorCode(err) != policy.EINTERNAL {
		t.Fatalf("a service without records: %v", err)
	}
}
