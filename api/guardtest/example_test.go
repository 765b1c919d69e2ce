package guardtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/api/guardtest"
)

// An agent's loop against a guard: refused at the minute limit, it waits
// as long as retry_after says, on the guard's clock, and is admitted again.
// In a test, agentBacksOff's body is the body of a func TestXxx(t
// *testing.T); README.md shows it so, and TestREADMEGoSnippet keeps the two
// the same.
func Example() {
	runExample(agentBacksOff)
	// Output:
	// call 1 admitted at +0s, 2 left this minute
	// call 2 admitted at +0s, 1 left this minute
	// call 3 admitted at +0s, 0 left this minute
	// refused: per-minute limit exceeded; waiting 60s
	// call 4 admitted at +1m0s, 2 left this minute
	// call 5 admitted at +1m0s, 1 left this minute
}

func agentBacksOff(t testing.TB) {
	start := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	g := guardtest.New(t, guardtest.WithStart(start), guardtest.WithTiers(client.Tier{
		Name: "trial", Limits: client.Limits{RequestsPerMinute: client.Limit(3), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)},
	}))
	pg := g.Client()
	ctx := context.Background()

	// The agent makes five model calls, asking the guard before each, and
	// waits out every refusal. Waiting on the guard's clock takes no time.
	for calls := 0; calls < 5; {
		d, err := pg.Check(ctx, client.CheckRequest{UserID: "alice", Tier: "trial"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			if !d.RateLimited() {
				t.Fatalf("refused for good: %s", d.Reason)
			}
			t.Logf("refused: %s; waiting %ds", d.Reason, d.RetryAfter)
			g.Clock().Advance(time.Duration(d.RetryAfter) * time.Second)
			continue
		}
		calls++
		t.Logf("call %d admitted at +%s, %d left this minute", calls, g.Clock().Now().Sub(start), d.Windows.Minute.Remaining)
	}
}

// A metered call that is never finished and expires: the agent crashed
// between its check and its finish. Its slot stays taken, so a second call
// is refused, until the call timeout passes on the guard's clock; the next
// check then finds the slot free, and the expired call counted its
// reservation.
func Example_expiredCall() {
	runExample(callExpires)
	// Output:
	// first call admitted: 1 of 1 in flight
	// second call refused: concurrent call limit exceeded (retry after 1s)
	// after 10m0s: admitted, 1 of 1 in flight, 1000 tokens used this hour
}

func callExpires(t testing.TB) {
	one, tokens := int64(1), int64(100000)
	g := guardtest.New(t, guardtest.WithCallTimeout(10*time.Minute), guardtest.WithTiers(client.Tier{Name: "solo", Limits: client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000), TokensPerHour: &tokens, MaxConcurrent: &one}}))
	pg := g.Client()
	ctx := context.Background()
	req := client.CheckRequest{UserID: "bob", Tier: "solo", Tokens: 500}

	d, err := pg.Check(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("first check: %+v %v", d, err)
	}
	t.Logf("first call admitted: %d of %d in flight", d.Concurrency.InFlight, d.Concurrency.Limit)
	// The agent never finishes d.CallID.
	if d, err = pg.Check(ctx, req); err != nil || d.Allowed {
		t.Fatalf("second check: %+v %v", d, err)
	}
	t.Logf("second call refused: %s (retry after %ds)", d.Reason, d.RetryAfter)

	g.Clock().Advance(10 * time.Minute)
	if d, err = pg.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("check after the timeout: %+v %v", d, err)
	}
	t.Logf("after %s: admitted, %d of %d in flight, %d tokens used this hour",
		10*time.Minute, d.Concurrency.InFlight, d.Concurrency.Limit, d.Windows.Hour.Tokens.Used)
}

// runExample gives f the testing.TB an Example has none of, and runs its
// cleanups when f returns.
func runExample(f func(t testing.TB)) {
	t := &exampleT{}
	defer t.cleanup()
	f(t)
}

// exampleT is a testing.TB for examples: Log and Logf print to stdout,
// where the example's Output checks them, and Fatal and Fatalf panic,
// which fails the example after its cleanups have run. Only the methods
// New and the examples call are implemented; the others panic on the nil
// embedded interface.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Log(args ...any)                   { fmt.Println(args...) }
func (t *exampleT) Logf(format string, args ...any)   { fmt.Printf(format+"\n", args...) }
func (t *exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "guardtest-example")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
