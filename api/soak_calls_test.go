package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The metered part of the soak: users of a tier with max_concurrent and
// token limits, each with several calls at once, finishing most calls with
// at most their reservation after a moment and abandoning a few to expire.
const (
	soakMeteredTier  = "soak-metered"
	soakMaxConc      = 2
	soakTokensMinute = 1500
	soakTokensHour   = 6000
	soakMeteredUsers = 2
	// soakCallTimeout is the service's call timeout in the soak: two
	// simulated hours, under two seconds of real time at the soak's speed.
	soakCallTimeout = 2 * time.Hour
	// soakSureOpen is how long, in real time, the client counts a call it
	// has not finished as surely still open in the service: well within
	// the call timeout however slow an answer was.
	soakSureOpen = 400 * time.Millisecond
)

var soakMeteredLimits = fmt.Sprintf(`{"requests_per_minute":1000,"requests_per_hour":100000,"requests_per_day":1000000,"burst_allowance":0,"tokens_per_minute":%d,"tokens_per_hour":%d,"max_concurrent":%d}`,
	soakTokensMinute, soakTokensHour, soakMaxConc)

// meteredSoak counts what the metered clients saw.
type meteredSoak struct {
	admitted, refused, finished, abandoned, usages atomic.Int64
	overAdmitted                                   atomic.Int64

	mu   sync.Mutex
	open map[string]map[string]time.Time // user -> call id -> when the client learnt of it (real time)
}

// sureOpen returns the calls of user the client holds unfinished and
// learnt of within soakSureOpen: calls the service surely counts in flight
// while the client still holds them.
func (m *meteredSoak) sureOpen(user string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, at := range m.open[user] {
		if time.Since(at) < soakSureOpen {
			ids = append(ids, id)
		}
	}
	return ids
}

// stillOpen returns how many of ids the client still holds open for user.
// A call leaves the client's set before its finish is sent, so a call in
// the set both before a check was sent and after its answer came was open
// in the service throughout the check.
func (m *meteredSoak) stillOpen(user string, ids []string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := m.open[user][id]; ok {
			n++
		}
	}
	return n
}

func (m *meteredSoak) setOpen(user, id string, open bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[user] == nil {
		m.open[user] = map[string]time.Time{}
	}
	if open {
		m.open[user][id] = time.Now()
	} else {
		delete(m.open[user], id)
	}
}

// runMeteredSoak starts workers metered checkers and one usage watcher
// against url until ctx ends, reporting broken promises to problem. Every
// admission must keep in_flight within max_concurrent and every token
// window's used within its limit, by the answer and by the calls the
// client itself surely holds open; every usage read must too.
func runMeteredSoak(ctx context.Context, wg *sync.WaitGroup, url string, workers int, problem func(string, ...any)) *meteredSoak {
	m := &meteredSoak{open: map[string]map[string]time.Time{}}
	post := func(client *http.Client, path, body string) (int, []byte, error) {
		res, err := client.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, b, err
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			client := &http.Client{Transport: &http.Transport{}}
			for ctx.Err() == nil {
				user := fmt.Sprintf("soak-metered-%d", rng.IntN(soakMeteredUsers))
				reserve := 100 + rng.Int64N(900)
				held := m.sureOpen(user)
				status, body, err := post(client, "/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":%q},"tokens":%d}`, user, soakMeteredTier, reserve))
				if err != nil {
					if ctx.Err() == nil {
						problem("metered check: %v", err)
					}
					continue
				}
				var d struct {
					Allowed     bool    `json:"allowed"`
					Reason      *string `json:"reason"`
					CallID      *string `json:"call_id"`
					Concurrency *struct {
						Limit    int64 `json:"limit"`
						InFlight int64 `json:"in_flight"`
					} `json:"concurrency"`
					Windows map[string]struct {
						Tokens *struct{ Limit, Used int64 } `json:"tokens"`
					} `json:"windows"`
				}
				if err := json.Unmarshal(body, &d); err != nil || d.Concurrency == nil {
					problem("metered check: %d %s", status, body)
					continue
				}
				if status == http.StatusTooManyRequests && !d.Allowed && d.CallID == nil {
					m.refused.Add(1)
					continue
				}
				if status != http.StatusOK || !d.Allowed || d.CallID == nil {
					problem("metered check: %d %s", status, body)
					continue
				}
				m.admitted.Add(1)
				before := m.stillOpen(user, held)
				over := d.Concurrency.InFlight > soakMaxConc || before+1 > soakMaxConc
				for _, win := range []string{"minute", "hour"} {
					if tk := d.Windows[win].Tokens; tk == nil || tk.Used > tk.Limit {
						over = true
					}
				}
				if over {
					m.overAdmitted.Add(1)
					problem("%s over-admitted: the client held %d calls open; answer %s", user, before, body)
				}
				id := *d.CallID
				m.setOpen(user, id, true)
				if rng.IntN(50) == 0 { // abandoned: the service expires it
					m.abandoned.Add(1)
					continue
				}
				select { // the model call
				case <-ctx.Done():
				case <-time.After(time.Duration(rng.IntN(5)) * time.Millisecond):
				}
				m.setOpen(user, id, false) // before the finish: the client never counts more than the service
				used := rng.Int64N(reserve + 1)
				status, body, err = post(client, "/v1/calls/"+id+"/finish", fmt.Sprintf(`{"tokens":%d}`, used))
				switch {
				case err != nil:
					if ctx.Err() == nil {
						problem("finish: %v", err)
					}
				case status != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"tokens":%d`, used)):
					problem("finish: %d %s", status, body)
				default:
					m.finished.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the usage watcher: no instant holds more than the limits
		defer wg.Done()
		client := &http.Client{Transport: &http.Transport{}}
		for ctx.Err() == nil {
			for i := range soakMeteredUsers {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/usage/soak-metered-%d?tier=%s", url, i, soakMeteredTier), nil)
				req.Header.Set("Authorization", "Bearer "+adminToken)
				res, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						problem("metered usage: %v", err)
					}
					continue
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				var u struct {
					CallsInFlight int64 `json:"calls_in_flight"`
					Windows       map[string]struct {
						Tokens struct{ Used, Limit int64 } `json:"tokens"`
					} `json:"windows"`
				}
				if err := json.Unmarshal(body, &u); err != nil || res.StatusCode != http.StatusOK {
					problem("metered usage: %d %s", res.StatusCode, body)
					continue
				}
				m.usages.Add(1)
				if u.CallsInFlight > soakMaxConc || u.Windows["minute"].Tokens.Used > soakTokensMinute || u.Windows["hour"].Tokens.Used > soakTokensHour {
					m.overAdmitted.Add(1)
					problem("metered usage over the limits: %s", body)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return m
}
