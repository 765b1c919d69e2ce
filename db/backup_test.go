package db_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// TestBackupUnderLoadKeepsEveryAnsweredWrite takes a backup while checks
// of many users are being admitted, and opens a service on the copy: every
// check answered before the backup began is in it, and so are the tier,
// the user record, both audit logs, and the open and finished calls.
func TestBackupUnderLoadKeepsEveryAnsweredWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path, copyPath := filepath.Join(dir, "live.db"), filepath.Join(dir, "copy.db")
	s := openStore(t, path)
	now := func() time.Time { return t0 }
	svc := policy.NewService(s, s, policy.WithUsers(s), policy.WithClock(now))
	day := int64(1_000_000)
	if _, _, err := svc.PutTier(ctx, policy.Tier{Name: "metered", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1000)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.TokensPerDay: &day}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "vip", Tier: "metered", Note: "kept"}); err != nil {
		t.Fatal(err)
	}
	open, err := svc.Check(ctx, policy.Request{UserID: "vip", Tokens: 70}, false)
	if err != nil || open.CallID == "" {
		t.Fatalf("open a call: %+v %v", open, err)
	}
	finished, err := svc.Check(ctx, policy.Request{UserID: "vip", Tokens: 30}, false)
	if err != nil || finished.CallID == "" {
		t.Fatalf("open a call: %+v %v", finished, err)
	}
	used := int64(25)
	if _, err := svc.FinishCall(ctx, finished.CallID, policy.Report{Tokens: &used}); err != nil {
		t.Fatal(err)
	}

	// Load: 8 clients, each checking its own users, counting what was
	// answered 200 before the backup began.
	var began atomic.Bool
	var answered atomic.Int64
	loaded, after := make(chan struct{}), make(chan struct{})
	var before sync.Map // user -> *atomic.Int64: admissions answered before the backup began
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := fmt.Sprintf("load-%d-%d", c, i%50)
				d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: "metered"}, false)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed() && !began.Load() {
					n, _ := before.LoadOrStore(user, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
				switch answered.Add(1) {
				case 300:
					close(loaded)
				case 600:
					close(after)
				}
			}
		}()
	}
	<-loaded
	began.Store(true)
	if err := db.Backup(ctx, path, copyPath); err != nil {
		t.Fatal(err)
	}
	<-after // the load goes on during and after the copy
	close(stop)
	wg.Wait()

	c := openStore(t, copyPath)
	csvc := policy.NewService(c, c, policy.WithUsers(c), policy.WithClock(now))
	users := 0
	before.Range(func(k, v any) bool {
		users++
		u, want := k.(string), v.(*atomic.Int64).Load()
		if got := count(t, c, u, t0.Add(-time.Hour)); got < want {
			t.Errorf("%s: %d requests in the copy, %d answered before the backup began", u, got, want)
		}
		if got, live := count(t, c, u, t0.Add(-time.Hour)), count(t, s, u, t0.Add(-time.Hour)); got > live {
			t.Errorf("%s: %d requests in the copy, %d in the original", u, got, live)
		}
		return true
	})
	if users == 0 {
		t.Fatal("no check was answered before the backup began")
	}
	if tier, err := csvc.Tier(ctx, "metered"); err != nil || tier.Limits[policy.TokensPerDay] == nil || *tier.Limits[policy.TokensPerDay] != day {
		t.Errorf("tier in the copy: %+v %v", tier, err)
	}
	if rec, err := csvc.User(ctx, "vip"); err != nil || rec.Tier != "metered" || rec.Note != "kept" {
		t.Errorf("user record in the copy: %+v %v", rec, err)
	}
	if ch, err := csvc.TierChanges(ctx, 100); err != nil || len(ch) == 0 || ch[0].Tier != "metered" && ch[len(ch)-1].Tier != "metered" {
		t.Errorf("tier audit in the copy: %d entries, %v", len(ch), err)
	}
	if ch, err := csvc.UserChanges(ctx, "vip", 100); err != nil || len(ch) != 1 {
		t.Errorf("user audit in the copy: %d entries, %v", len(ch), err)
	}
	rep, err := csvc.UsageReport(ctx, "vip", "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.CallsInFlight != 1 || rep.Windows[policy.Day].Count != 2 || rep.Windows[policy.Day].Tokens == nil || rep.Windows[policy.Day].Tokens.Used != 70+25 {
		t.Errorf("vip's usage in the copy: %d in flight, %d requests, tokens %+v; want 1, 2 and 95 used", rep.CallsInFlight, rep.Windows[policy.Day].Count, rep.Windows[policy.Day].Tokens)
	}
	if _, err := csvc.FinishCall(ctx, open.CallID, policy.Report{}); err != nil {
		t.Errorf("the open call in the copy: %v", err)
	}
}

func TestBackupRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "live.db")
	openStore(t, path)
	exists := filepath.Join(dir, "exists.db")
	if err := os.WriteFile(exists, []byte("an older backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, dest, want string
	}{
		{"existing file", path, exists, exists + " exists"},
		{"postgres", "postgres://u:secret@localhost/x", filepath.Join(dir, "a.db"), "use pg_dump"},
		{"no database", filepath.Join(dir, "missing.db"), filepath.Join(dir, "b.db"), "does not exist"},
		{"not a database", notDB, filepath.Join(dir, "c.db"), "not a database"},
		{"directory", dir, filepath.Join(dir, "d.db"), "is a directory"},
	} {
		err := db.Backup(ctx, tc.src, tc.dest)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the password is in %q", tc.name, err)
		}
	}
	if b, err := os.ReadFile(exists); err != nil || string(b) != "an older backup" {
		t.Errorf("the existing file was changed: %q %v", b, err)
	}
	for _, name := range []string{"a.db", "b.db", "c.db", "d.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("a failed backup left %s: %v", name, err)
		}
	}
}
