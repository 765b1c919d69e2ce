package load

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// loadAccounts is how many accounts the accounts phase spreads its
// rotating users over.
const loadAccounts = 100

// accountsLoad is the accounts phase: two services on SQLite FULL with
// the same benchmark tier, whose pooled limits (like its own) no check
// reaches, and a record for each rotating user. On one the records assign
// the tier; on the other they name one of loadAccounts accounts on it, so
// that every check is also decided against, and recorded in, its
// account's pool. wrk drives both in alternating rounds; the ratio of
// their throughputs is what a member's check costs.
func accountsLoad(t *testing.T, out io.Writer, cfg loadConfig, gen *generator, bin, dir string) {
	t.Helper()
	begin := time.Now()
	pooledTier := fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":%d,"requests_per_day":%d,"burst_allowance":0,"features":["*"],`+
		`"account":{"requests_per_minute":%[1]d,"requests_per_hour":%[1]d,"requests_per_day":%[1]d}}`,
		policy.MaxLimit, policy.MaxLimit, policy.MaxLimit)
	plain := startService(t, bin, dir, filepath.Join(dir, "plain.db"), "FULL", time.Hour)
	plain.name = "users in no account"
	members := startService(t, bin, dir, filepath.Join(dir, "members.db"), "FULL", time.Hour)
	members.name = fmt.Sprintf("users in %d accounts", loadAccounts)
	for _, tg := range []*target{plain, members} {
		tg.putTier(t, pooledTier)
	}
	for i := range loadAccounts {
		adminPut(t, members, fmt.Sprintf("/v1/accounts/acct-%03d", i), fmt.Sprintf(`{"tier":%q}`, loadTier))
	}
	var wg sync.WaitGroup
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < cfg.users; i += workers {
				user := fmt.Sprintf("/v1/users/user-%05d", i)
				adminPut(t, plain, user, fmt.Sprintf(`{"tier":%q}`, loadTier))
				adminPut(t, members, user, fmt.Sprintf(`{"account":"acct-%03d"}`, i%loadAccounts))
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "\nAccounts: %d records on each service, %d accounts, made in %v\n", cfg.users, loadAccounts, time.Since(begin).Round(time.Millisecond))

	targets := []*target{plain, members}
	for _, tg := range targets {
		gen.run(t, tg, cfg.conns, time.Second) // warm up
	}
	results := map[*target][]result{}
	for range cfg.rounds {
		for _, tg := range targets {
			results[tg] = append(results[tg], gen.run(t, tg, cfg.conns, cfg.round))
		}
	}
	fmt.Fprintf(out, "POST /v1/check, %d connections, %d rotating users, %s (median of %d rounds)\n", cfg.conns, cfg.users, gen.name(), cfg.rounds)
	fmt.Fprintf(out, "%-26s %10s %8s %8s   %s\n", "target", "req/s", "p50", "p99", "req/s per round")
	for _, tg := range targets {
		m := medianResult(results[tg])
		fmt.Fprintf(out, "%-26s %10.0f %8s %8s   %v\n", tg.name, m.rps, ms(m.p50), ms(m.p99), rates(results[tg]))
	}
	cost := medianRatio(results[plain], results[members])
	fmt.Fprintf(out, "a member's check costs %.3fx one of a user in no account per round %v   target <= 1.3x: %s\n",
		cost, ratios(results[plain], results[members]), verdict(cost <= 1.3))
	if n := members.pooledCount(t, "acct-000"); n == 0 {
		t.Errorf("%s: account acct-000 counts no request in its day after the rounds", members.name)
	}
	plain.stop(t)
	members.stop(t)
}

// adminPut sends body to path on tg with the admin token; any answer but
// 200 or 201 fails the test.
func adminPut(t *testing.T, tg *target, path, body string) {
	req, _ := http.NewRequest(http.MethodPut, "http://"+tg.addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		t.Errorf("PUT %s: %s %s", path, res.Status, data)
	}
}

// pooledCount returns the requests the account's pool counts in its day.
func (tg *target) pooledCount(t *testing.T, account string) int64 {
	t.Helper()
	var u struct {
		Windows struct {
			Day struct {
				Count int64 `json:"count"`
			} `json:"day"`
		} `json:"windows"`
	}
	getJSON(t, "http://"+tg.addr+"/v1/accounts/"+account+"/usage", &u)
	return u.Windows.Day.Count
}
