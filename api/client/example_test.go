package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// Calling a policyguard service from Go. The service here runs in the
// example on a temporary database; in real use it is the URL of your
// deployment.
func Example() {
	dir, err := os.MkdirTemp("", "policyguard-client-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := db.Open(ctx, filepath.Join(dir, "guardrail.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	srv := httptest.NewServer(api.NewServer(api.Config{
		Service: policy.NewService(store, store),
		Admin:   policy.NewAdminGate("secret"),
		Logger:  slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()

	pg, err := client.New(srv.URL, client.WithAdminToken("secret"))
	if err != nil {
		log.Fatal(err)
	}
	_, created, err := pg.PutTier(ctx, client.Tier{Name: "lesson", Limits: client.Limits{RequestsPerMinute: client.Limit(2), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}, Features: []string{"chat"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created lesson:", created)

	for i := 0; i < 3; i++ {
		d, err := pg.Check(ctx, client.CheckRequest{UserID: "alice", Tier: "lesson", Feature: "chat"})
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			fmt.Println("allowed,", d.Windows.Minute.Remaining, "left this minute")
		} else {
			fmt.Printf("refused: %s (retry after %ds)\n", d.Reason, d.RetryAfter)
		}
	}

	u, err := pg.Usage(ctx, "alice", "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice today:", u.Windows.Day.Count)

	var e *client.Error
	if _, err := pg.Tier(ctx, "gold"); errors.As(err, &e) {
		fmt.Println(e.StatusCode, e.Message)
	}
	// Output:
	// created lesson: true
	// allowed, 1 left this minute
	// allowed, 0 left this minute
	// refused: per-minute limit exceeded (retry after 60s)
	// alice today: 2
	// 404 tier "gold" not found
}
