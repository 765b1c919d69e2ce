package db_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// Using the store and the policy service inside another Go program.
func Example() {
	dir, _ := os.MkdirTemp("", "policyguard-example")
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := db.Open(ctx, filepath.Join(dir, "guardrail.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// A tier of 2 requests a minute, then three checks for one user.
	svc := policy.NewService(store, store)
	_, _, err = svc.PutTier(ctx, policy.Tier{Name: "tiny", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}})
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		d, err := svc.Check(ctx, policy.Request{UserID: "alice", Tier: "tiny"}, false)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed(), d.Reason, d.RetryAfter > 0)
	}
	// Output:
	// true  false
	// true  false
	// false per-minute limit exceeded true
}
