package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// Guarding a route of your own Echo app in-process: the user comes from a
// header, the tier and the feature from the route.
func ExampleGuard() {
	dir, err := os.MkdirTemp("", "policyguard-example")
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
	svc := policy.NewService(store, store)
	starter := policy.Tier{Name: "starter", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{"summarize"}}
	if _, _, err := svc.PutTier(ctx, starter); err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	guard := api.Guard(api.GuardConfig{
		Service: svc,
		Request: func(c echo.Context) (policy.Request, error) {
			user := c.Request().Header.Get("X-User")
			if user == "" {
				return policy.Request{}, echo.ErrUnauthorized
			}
			return policy.Request{UserID: user, Tier: "starter", Feature: "summarize"}, nil
		},
	})
	e.POST("/summarize", func(c echo.Context) error {
		d, _ := api.GuardDecision(c)
		return c.String(http.StatusOK, fmt.Sprintf("summary (%d left this minute)", d.Windows[policy.Minute].Remaining))
	}, guard)

	srv := httptest.NewServer(e)
	defer srv.Close()
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/summarize", nil)
		req.Header.Set("X-User", "alice")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			// Refusals carry the body of POST /v1/check.
			var d struct{ Reason string }
			json.Unmarshal(body, &d)
			fmt.Println(res.StatusCode, d.Reason, "- Retry-After:", res.Header.Get("Retry-After"))
			continue
		}
		fmt.Println(res.StatusCode, string(body))
	}
	// Output:
	// 200 summary (1 left this minute)
	// 200 summary (0 left this minute)
	// 429 per-minute limit exceeded - Retry-After: 60
}
