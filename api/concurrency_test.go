package api_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/policyguard/policyguard/api"
)

// TestConcurrentClientsAdmitExactly sends checks from 64 HTTP clients at
// once, each on its own connections, with the clock standing still: first
// all on one user, then spread over 200 users. Exactly each window's
// ceiling is admitted, every other answer is 429, nothing else comes back
// (no 5xx, no "database is locked"), and the store holds exactly what was
// admitted.
func TestConcurrentClientsAdmitExactly(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	srv := httpServer(t, e.srv)
	e.putTier("hot", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":20}`)
	e.putTier("many", `{"requests_per_minute":5,"requests_per_hour":5,"requests_per_day":5,"burst_allowance":0}`)

	const clients = 64
	for _, tc := range []struct {
		name    string
		users   int
		tier    string
		ceiling int
		each    int // requests per user
	}{
		{"one user", 1, "hot", 120, 10 * clients},
		{"200 users", 200, "many", 5, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies []string
			for u := range tc.users {
				for range tc.each {
					bodies = append(bodies, fmt.Sprintf(`{"context":{"user_id":"%s-%d","user_tier":%q}}`, strings.ReplaceAll(tc.name, " ", "-"), u, tc.tier))
				}
			}
			rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
			work := make(chan string, len(bodies))
			for _, b := range bodies {
				work <- b
			}
			close(work)

			before := e.requests.recorded.Load()
			var mu sync.Mutex
			statuses := map[int]int{}
			var odd []string
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					client := &http.Client{Transport: &http.Transport{}}
					defer client.CloseIdleConnections()
					for body := range work {
						res, err := client.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
						if err != nil {
							mu.Lock()
							odd = append(odd, err.Error())
							mu.Unlock()
							continue
						}
						b, _ := io.ReadAll(res.Body)
						res.Body.Close()
						mu.Lock()
						statuses[res.StatusCode]++
						if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests || strings.Contains(string(b), "locked") {
							odd = append(odd, fmt.Sprintf("%d %s", res.StatusCode, b))
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for _, o := range odd {
				t.Errorf("answer: %s", o)
			}
			admitted := tc.users * tc.ceiling
			if statuses[200] != admitted || statuses[429] != len(bodies)-admitted {
				t.Fatalf("statuses %v, want %d admitted and %d refused", statuses, admitted, len(bodies)-admitted)
			}
			if got := e.requests.recorded.Load() - before; got != int64(admitted) {
				t.Fatalf("recorded %d, want %d", got, admitted)
			}
			for u := range tc.users {
				if got := e.dayCount(fmt.Sprintf("%s-%d", strings.ReplaceAll(tc.name, " ", "-"), u)); got != int64(tc.ceiling) {
					t.Fatalf("user %d holds %d, want %d", u, got, tc.ceiling)
				}
			}
			t.Logf("%d clients, %d checks over %d users: %d admitted, %d refused, no other answer", clients, len(bodies), tc.users, statuses[200], statuses[429])
		})
	}
	if logs := e.logs.String(); strings.Contains(logs, "locked") || strings.Contains(logs, `"level":"ERROR"`) {
		t.Fatalf("the log has errors:\n%s", logs)
	}
}
