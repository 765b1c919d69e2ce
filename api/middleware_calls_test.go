package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

func int64p(v int64) *int64 { return &v }

// meteredApp is an Echo app whose routes Guard guards under a tier with
// max_concurrent 1 and 1000 tokens a minute, each reserving the tokens of
// its X-Tokens header. Its handler reports X-Used tokens when set (or
// usage, "input,output"), and then fails or panics as X-End says.
func meteredApp(t *testing.T) (*echo.Echo, *policy.Service) {
	t.Helper()
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.DSN(t, "guard.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(store, store, policy.WithClock(clk.Now))
	tier := policy.Tier{Name: "metered", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.TokensPerMinute: int64p(1000), policy.MaxConcurrent: int64p(1)}}
	if _, _, err := svc.PutTier(ctx, tier); err != nil {
		t.Fatal(err)
	}
	app := echo.New()
	app.Logger.SetOutput(io.Discard)
	app.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // answers a panic 500, as Echo's Recover does
		return func(c echo.Context) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = echo.NewHTTPError(http.StatusInternalServerError, "panic")
				}
			}()
			return next(c)
		}
	})
	app.GET("/model", func(c echo.Context) error {
		if used := c.Request().Header.Get("X-Used"); used != "" {
			if in, out, split := strings.Cut(used, ","); split {
				i, _ := strconv.ParseInt(in, 10, 64)
				o, _ := strconv.ParseInt(out, 10, 64)
				api.ReportUsage(c, policy.TokenUsage{Input: i, Output: o})
			} else {
				n, _ := strconv.ParseInt(used, 10, 64)
				api.ReportTokens(c, n)
			}
		}
		switch c.Request().Header.Get("X-End") {
		case "error":
			return errors.New("the model failed")
		case "panic":
			panic("the model panicked")
		}
		d, _ := api.GuardDecision(c)
		return c.String(http.StatusOK, d.CallID)
	}, api.Guard(api.GuardConfig{
		Service: svc,
		Request: func(c echo.Context) (policy.Request, error) {
			n, _ := strconv.ParseInt(c.Request().Header.Get("X-Tokens"), 10, 64)
			return policy.Request{UserID: "u", Tier: "metered", Tokens: n}, nil
		},
	}))
	return app, svc
}

// Guard finishes the call it opened when the handler returns, also on an
// error or a panic, with the count the handler reported or else the
// reservation: the next request finds the slot free and the tokens used.
func TestGuardFinishesCalls(t *testing.T) {
	app, svc := meteredApp(t)
	used := int64(0)
	for _, tc := range []struct {
		name, reserve, report, end string
		status                     int
		counted                    int64 // the tokens the finished call counts
	}{
		{"reported count", "300", "120", "", 200, 120},
		{"reported usage", "300", "100,25", "", 200, 125},
		{"no count: the reservation", "200", "", "", 200, 200},
		{"handler error", "100", "40", "error", 500, 40},
		{"handler error without a count", "50", "", "error", 500, 50},
		{"panic", "100", "70", "panic", 500, 70},
		{"panic without a count", "30", "", "panic", 500, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/model", nil)
			req.Header.Set("X-Tokens", tc.reserve)
			req.Header.Set("X-Used", tc.report)
			req.Header.Set("X-End", tc.end)
			rec := httptest.NewRecorder()
			app.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d %s, want %d", rec.Code, rec.Body, tc.status)
			}
			u, err := svc.UsageReport(context.Background(), "u", "metered")
			if err != nil {
				t.Fatal(err)
			}
			used += tc.counted
			if got := u.Windows[policy.Minute].Tokens.Used; u.CallsInFlight != 0 || got != used {
				t.Fatalf("after the handler: %d calls in flight, %d tokens used; want 0 and %d", u.CallsInFlight, got, used)
			}
		})
	}
}

// The call id Guard opened is the handler's through GuardDecision, and the
// refusal of a second call while one is open is Guard's 429.
func TestGuardRefusesOverMaxConcurrent(t *testing.T) {
	app, svc := meteredApp(t)
	// A call opened outside the app holds the only slot.
	d, err := svc.Check(context.Background(), policy.Request{UserID: "u", Tier: "metered", Tokens: 10}, false)
	if err != nil || d.CallID == "" {
		t.Fatalf("check: %+v %v", d, err)
	}
	rec := httptest.NewRecorder()
	app.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/model", nil))
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), `"reason":"concurrent call limit exceeded"`) || !strings.Contains(rec.Body.String(), `"call_id":null`) {
		t.Fatalf("while the slot is held: %d %s", rec.Code, rec.Body)
	}
	if _, err := svc.FinishCall(context.Background(), d.CallID, policy.Report{}); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	app.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/model", nil))
	if rec.Code != 200 || rec.Body.Len() == 0 || rec.Header().Get("X-RateLimit-Limit-Tokens") != "1000" {
		t.Fatalf("after the finish: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if _, err := svc.KeepAlive(context.Background(), rec.Body.String()); policy.ErrorCode(err) != policy.ECONFLICT {
		t.Fatalf("the call the handler saw is not finished: %v", err)
	}
}
