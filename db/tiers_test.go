package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// A tier written through another Store on the same file (another process,
// such as policyguard tiers import) applies to this store's very next check,
// without a restart and without waiting.
func TestTierWriteByAnotherStoreAppliesToTheNextCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		running := openStore(t, path)
		svc := policy.NewService(running, running, policy.WithClock(func() time.Time { return t0 }))
		ctx := context.Background()
		check := func() (policy.Decision, error) {
			return svc.Check(ctx, policy.Request{UserID: "u", Tier: "lesson"}, true)
		}
		if _, err := check(); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("check before the import: err = %v, want unknown tier", err)
		}

		importer := openStore(t, path)
		lesson := policy.Tier{Name: "lesson", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(0)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Features: []string{}}
		if _, err := importer.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceImport, Put: []policy.Tier{lesson}}); err != nil {
			t.Fatal(err)
		}
		d, err := check()
		if err != nil {
			t.Fatalf("check right after the import: %v", err)
		}
		if d.Allowed() || d.Reason != "per-minute limit exceeded" {
			t.Fatalf("decision %+v, want refused by the imported 0/min", d)
		}

		lesson.Limits[policy.RequestsPerMinute] = new(int64(1))
		if _, err := importer.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceImport, Put: []policy.Tier{lesson}}); err != nil {
			t.Fatal(err)
		}
		if d, err := check(); err != nil || !d.Allowed() {
			t.Fatalf("check after raising the limit: %+v, %v", d, err)
		}
		tiers, err := running.Tiers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(tierNames(tiers)); got != "[enterprise free lesson pro]" {
			t.Errorf("Tiers = %s", got)
		}

		if _, err := importer.UpdateTiers(ctx, policy.TierUpdate{Delete: []string{"lesson"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := check(); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("check after the tier was deleted elsewhere: err = %v, want unknown tier", err)
		}
	})
}

// Any write to the tiers table is noticed, even one made without this
// program, because triggers count them.
func TestTierEditedWithPlainSQLIsSeen(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		s := openStore(t, path)
		ctx := context.Background()
		if got, _ := s.Tier(ctx, "free"); got.Limits.Value(policy.RequestsPerMinute) != 10 {
			t.Fatalf("seeded free: %+v", got)
		}
		shell, err := bk.raw(path)
		if err != nil {
			t.Fatal(err)
		}
		defer shell.Close()
		update := `UPDATE tiers SET limits = json_set(limits, '$.requests_per_minute', 3) WHERE name = 'free'`
		if bk.name == "postgres" {
			update = `UPDATE tiers SET limits = jsonb_set(limits, '{requests_per_minute}', '3') WHERE name = 'free'`
		}
		if _, err := shell.Exec(update); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Tier(ctx, "free"); err != nil || got.Limits.Value(policy.RequestsPerMinute) != 3 {
			t.Fatalf("after the shell's UPDATE: %+v, %v; want 3 per minute", got, err)
		}
	})
}

func TestUpdateTiersIsAllOrNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
		_, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceAPI, Put: []policy.Tier{team}, Delete: []string{"ghost"}})
		if policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("err = %v, want ENOTFOUND for ghost", err)
		}
		if _, err := s.Tier(ctx, "team"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("team was created by a failed update: %v", err)
		}
		if changes, err := s.TierChanges(ctx, 10); err != nil || len(changes) != 0 {
			t.Fatalf("audit after a failed update: %+v, %v", changes, err)
		}
		for _, u := range []policy.TierUpdate{
			{Put: []policy.Tier{team, team}},
			{Put: []policy.Tier{team}, Delete: []string{"team"}},
			{Put: []policy.Tier{{Name: "Bad"}}},
		} {
			if _, err := s.UpdateTiers(ctx, u); policy.ErrorCode(err) != policy.EINVALID {
				t.Errorf("%+v: err = %v, want EINVALID", u, err)
			}
		}
	})
}

func TestUpdateTiersSkipsUnchangedAndPrunes(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		free, _ := s.Tier(ctx, "free")
		pro, _ := s.Tier(ctx, "pro")
		oldPro := pro
		pro.Limits[policy.RequestsPerMinute] = new(int64(61))
		pro.Features = []string{"chat"}
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Description: "<b>team</b>"}
		at := t0.Add(time.Hour)
		changes, err := s.UpdateTiers(ctx, policy.TierUpdate{
			At: at, Source: policy.SourceImport, Put: []policy.Tier{free, pro, team}, Prune: true, SkipUnchanged: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range changes {
			kind := "updated"
			switch {
			case c.Created():
				kind = "created"
			case c.Deleted():
				kind = "deleted"
			}
			got = append(got, kind+" "+c.Tier)
		}
		if g, want := fmt.Sprint(got), "[updated pro created team deleted enterprise]"; g != want {
			t.Fatalf("changes %s, want %s", g, want)
		}
		if c := changes[0]; c.Old.Limits.Value(policy.RequestsPerMinute) != oldPro.Limits.Value(policy.RequestsPerMinute) || c.New.Limits.Value(policy.RequestsPerMinute) != 61 || !c.At.Equal(at) || c.Source != policy.SourceImport {
			t.Errorf("pro's change: %+v", c)
		}
		tiers, _ := s.Tiers(ctx)
		if g := fmt.Sprint(tierNames(tiers)); g != "[free pro team]" {
			t.Errorf("tiers after the import %s", g)
		}
		if f, _ := s.Tier(ctx, "free"); !f.UpdatedAt.IsZero() {
			t.Errorf("unchanged free got UpdatedAt %v", f.UpdatedAt)
		}
		if p, _ := s.Tier(ctx, "pro"); !p.UpdatedAt.Equal(at) {
			t.Errorf("pro UpdatedAt %v, want %v", p.UpdatedAt, at)
		}

		// The same import again changes nothing and logs nothing.
		again, err := s.UpdateTiers(ctx, policy.TierUpdate{At: at.Add(time.Hour), Source: policy.SourceImport,
			Put: []policy.Tier{free, pro, team}, Prune: true, SkipUnchanged: true})
		if err != nil || len(again) != 0 {
			t.Fatalf("second import: %+v, %v; want no change", again, err)
		}
		if log, _ := s.TierChanges(ctx, 100); len(log) != 3 {
			t.Errorf("audit has %d entries, want 3", len(log))
		}
	})
}

// Every change is kept with its path, its time and the tier before and
// after, and a second store on the file reads the same log.
func TestAuditLogRecordsSourceAndValues(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		s := openStore(t, path)
		now := t0
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }))
		ctx := context.Background()

		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(7)), policy.RequestsPerHour: new(int64(70)), policy.RequestsPerDay: new(int64(700))}, Features: []string{"chat"}, Description: `say "hi"`}
		if _, _, err := svc.PutTier(policy.WithChangeSource(ctx, policy.SourceAPI), team); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
		team.Limits[policy.RequestsPerMinute] = new(int64(8))
		if _, _, err := svc.PutTier(policy.WithChangeSource(ctx, policy.SourceAdmin), team); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
		if _, err := svc.ImportTiers(ctx, []policy.Tier{{Name: "solo", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}}, false); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
		if err := svc.DeleteTier(ctx, "team"); err != nil { // no source set: a Go program
			t.Fatal(err)
		}

		log, err := openStore(t, path).TierChanges(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		type entry struct {
			tier, source string
			at           time.Time
			oldRPM       int64 // -1 for none
			newRPM       int64
		}
		rpm := func(t *policy.Tier) int64 {
			if t == nil {
				return -1
			}
			return t.Limits.Value(policy.RequestsPerMinute)
		}
		want := []entry{
			{"team", policy.SourceLibrary, t0.Add(3 * time.Minute), 8, -1},
			{"solo", policy.SourceImport, t0.Add(2 * time.Minute), -1, 1},
			{"team", policy.SourceAdmin, t0.Add(time.Minute), 7, 8},
			{"team", policy.SourceAPI, t0, -1, 7},
		}
		if len(log) != len(want) {
			t.Fatalf("%d entries, want %d: %+v", len(log), len(want), log)
		}
		for i, w := range want {
			c := log[i]
			if got := (entry{c.Tier, c.Source, c.At, rpm(c.Old), rpm(c.New)}); got != w {
				t.Errorf("entry %d = %+v, want %+v", i, got, w)
			}
		}
		if d := log[0].Old; d.Description != `say "hi"` || fmt.Sprint(d.Features) != "[chat]" {
			t.Errorf("deleted tier's values: %+v", d)
		}
		if !(log[0].ID > log[1].ID && log[1].ID > log[2].ID) {
			t.Errorf("ids not newest first: %d %d %d", log[0].ID, log[1].ID, log[2].ID)
		}
		if short, _ := s.TierChanges(ctx, 1); len(short) != 1 || short[0].ID != log[0].ID {
			t.Errorf("TierChanges(1) = %+v", short)
		}
	})
}

func tierNames(tiers []policy.Tier) []string {
	var names []string
	for _, t := range tiers {
		names = append(names, t.Name)
	}
	return names
}

var _ policy.TierStore = (*db.Store)(nil)

// Put modes and the version precondition are checked inside the write
// transaction, against what is stored, including changes made through
// another store on the same file (another process).
func TestUpdateTiersPreconditions(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		s, other := openStore(t, path), openStore(t, path)
		put := func(u policy.TierUpdate) error {
			u.Source = policy.SourceLibrary
			_, err := s.UpdateTiers(ctx, u)
			return err
		}
		free, err := s.Tier(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		if !free.UpdatedAt.IsZero() {
			t.Fatalf("seeded free UpdatedAt %v, want zero", free.UpdatedAt)
		}
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(100))}}
		logLen := func() int {
			log, err := s.TierChanges(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			return len(log)
		}
		zero := time.Time{}
		edited := free
		edited.Limits[policy.RequestsPerMinute] = new(int64(11))

		for _, tc := range []struct {
			name string
			u    policy.TierUpdate
			want string // error code, "" for success
		}{
			{"replace a missing tier", policy.TierUpdate{At: t0, Put: []policy.Tier{team}, Mode: policy.PutReplace}, policy.ENOTFOUND},
			{"create a missing tier", policy.TierUpdate{At: t0, Put: []policy.Tier{team}, Mode: policy.PutCreate}, ""},
			{"create it again", policy.TierUpdate{At: t0.Add(time.Second), Put: []policy.Tier{team}, Mode: policy.PutCreate}, policy.ECONFLICT},
			{"create one that exists among new ones", policy.TierUpdate{At: t0, Put: []policy.Tier{{Name: "new", Limits: policy.LimitSet{policy.RequestsPerDay: new(int64(1))}}, free}, Mode: policy.PutCreate}, policy.ECONFLICT},
			{"edit a seeded tier read as seeded", policy.TierUpdate{At: t0, Put: []policy.Tier{edited}, Mode: policy.PutReplace, IfUpdatedAt: &zero}, ""},
			{"edit it again on the seeded read", policy.TierUpdate{At: t0.Add(time.Minute), Put: []policy.Tier{free}, Mode: policy.PutReplace, IfUpdatedAt: &zero}, policy.ECONFLICT},
		} {
			before := logLen()
			err := put(tc.u)
			if got := policy.ErrorCode(err); got != tc.want {
				t.Fatalf("%s: error %v, want code %q", tc.name, err, tc.want)
			}
			wantLog := before
			if tc.want == "" {
				wantLog += len(tc.u.Put)
			}
			if got := logLen(); got != wantLog {
				t.Errorf("%s: audit log has %d entries, want %d", tc.name, got, wantLog)
			}
		}
		if _, err := s.Tier(ctx, "new"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("a refused update stored part of itself: %v", err)
		}
		if got, _ := s.Tier(ctx, "team"); !got.UpdatedAt.Equal(t0) {
			t.Errorf("a refused create replaced team: UpdatedAt %v, want %v", got.UpdatedAt, t0)
		}

		// Another process edits free: an edit based on the earlier read fails,
		// one based on the new read succeeds.
		read, err := s.Tier(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		theirs := read
		theirs.Limits[policy.RequestsPerMinute] = new(int64(12))
		if _, err := other.UpdateTiers(ctx, policy.TierUpdate{At: t0.Add(time.Hour), Source: policy.SourceLibrary, Put: []policy.Tier{theirs}}); err != nil {
			t.Fatal(err)
		}
		mine := read
		mine.Limits[policy.RequestsPerMinute] = new(int64(13))
		stale := read.UpdatedAt
		if err := put(policy.TierUpdate{At: t0.Add(2 * time.Hour), Put: []policy.Tier{mine}, IfUpdatedAt: &stale}); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("edit on a stale read: %v, want ECONFLICT", err)
		}
		if got, _ := s.Tier(ctx, "free"); got.Limits.Value(policy.RequestsPerMinute) != 12 {
			t.Fatalf("the other process's edit was lost: requests_per_minute %d, want 12", got.Limits.Value(policy.RequestsPerMinute))
		}
		fresh := t0.Add(time.Hour)
		if err := put(policy.TierUpdate{At: t0.Add(2 * time.Hour), Put: []policy.Tier{mine}, IfUpdatedAt: &fresh}); err != nil {
			t.Fatalf("edit on a fresh read: %v", err)
		}
		if got, _ := other.Tier(ctx, "free"); got.Limits.Value(policy.RequestsPerMinute) != 13 {
			t.Fatalf("requests_per_minute %d, want 13", got.Limits.Value(policy.RequestsPerMinute))
		}
	})
}
