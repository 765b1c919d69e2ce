package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A check that records takes its tier from memory, without reading the
// database, and the writer confirms it when recording. A tier changed by
// another process (another Store on the file) must still apply to the very
// next recording check.
func TestTierWriteByAnotherStoreAppliesToTheNextRecordingCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		running := openStore(t, path)
		now := t0
		svc := policy.NewService(running, running, policy.WithClock(func() time.Time { return now }))
		ctx := context.Background()
		importer := openStore(t, path)
		put := func(perMinute int64, features ...string) {
			t.Helper()
			now = now.Add(time.Second)
			tier := policy.Tier{Name: "lesson", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(perMinute)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}, Features: append([]string{}, features...), UpdatedAt: now}
			if _, err := importer.UpdateTiers(ctx, policy.TierUpdate{At: now, Source: policy.SourceImport, Put: []policy.Tier{tier}}); err != nil {
				t.Fatal(err)
			}
		}
		check := func(feature string) policy.Decision {
			t.Helper()
			d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "lesson", Feature: feature}, false)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}

		put(5, "chat")
		if d := check("chat"); !d.Allowed() {
			t.Fatalf("first check: %+v", d)
		}
		put(1, "chat") // one request a minute, and u has had one
		if d := check("chat"); d.Allowed() || d.Reason != "per-minute limit exceeded" {
			t.Fatalf("check after lowering the limit elsewhere: %+v, want refused", d)
		}
		put(5, "chat")
		if d := check("chat"); !d.Allowed() {
			t.Fatalf("check after raising the limit elsewhere: %+v, want admitted", d)
		}
		put(5, "chat", "search") // a feature added elsewhere is usable at once
		if d := check("search"); !d.Allowed() {
			t.Fatalf("check of a feature added elsewhere: %+v, want admitted", d)
		}
		put(5) // and one removed is refused at once
		if d := check("chat"); d.Outcome != policy.Denied {
			t.Fatalf("check of a feature removed elsewhere: %+v, want denied", d)
		}
		if _, err := importer.UpdateTiers(ctx, policy.TierUpdate{Delete: []string{"lesson"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "lesson"}, false); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("check of a tier deleted elsewhere: %v, want unknown tier", err)
		}
		if got := count(t, running, "u", t0); got != 3 {
			t.Fatalf("%d requests recorded, want 3", got)
		}
	})
}
