package load

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// The PostgreSQL part of the load benchmark: the service on one local
// PostgreSQL server as 1, 2 and 3 replicas, each set of replicas on a
// fresh database of its own (dbtest.Postgres), in the same alternating
// rounds as the other targets, and the flatness test on the 1-replica set.
// Without a server it is left out, and the rest runs; under CI=true a
// missing server fails the test, as dbtest does.
//
// A set of k replicas is driven by k load generators at once, one per
// replica, which share the connections (conns/k each, the remainder to
// the first). Each rotates over all the users, from its own first user
// (replica i of k starts at user i*users/k), as a load balancer that sends
// any user to any replica would: the replicas share each user's quota
// through the database. A set's req/s is the sum of its generators', its
// latencies the worst of theirs.

// pgTargets are the PostgreSQL targets of one run.
type pgTargets struct {
	sets [3]*target // 1, 2 and 3 replicas; sets[0] is the replica itself
}

// startPostgres starts the PostgreSQL targets, each set on a fresh
// database that is dropped when t ends, and seeds the heavy user of the
// flatness test into the 1-replica set's database. It returns nil, having
// said why, when no PostgreSQL server answers.
func startPostgres(t *testing.T, out io.Writer, cfg loadConfig, bin, dir string) *pgTargets {
	t.Helper()
	// dbtest skips (or, under CI=true, fails) the test that asks when no
	// server answers: a subtest asks first, so that only it is skipped.
	found := false
	t.Run("PostgreSQL", func(t *testing.T) {
		dbtest.Postgres(t)
		found = true
	})
	if !found {
		fmt.Fprintf(out, "PostgreSQL targets left out: no server answered (see TestLoad/PostgreSQL above)\n")
		return nil
	}
	var urls [3]string
	for i := range urls {
		urls[i] = dbtest.Postgres(t)
	}
	server, settings := pgSettings(t, urls[0])
	// All six processes run at once, and a pool keeps the connections it
	// opened: six of the default size would take most of a default server
	// (max_connections 100), and a check that cannot connect fails. Each
	// gets an equal share of what the server has free, less a spare for
	// other clients, up to the default.
	const processes, spare = 6, 10
	pool := min(db.DefaultPoolSize, (server.free-spare)/processes)
	if pool < 1 {
		t.Fatalf("PostgreSQL at %s has %d connections free; the benchmark needs %d", server.host, server.free, processes+spare)
	}
	fmt.Fprintf(out, "PostgreSQL %s at %s (%s); the service as 1, 2 and 3 replicas, each set on a fresh database, -pg-pool-size %d each",
		server.version, server.host, settings, pool)
	if pool < db.DefaultPoolSize {
		fmt.Fprintf(out, " (not the default %d: the server has %d connections free for all %d processes)", db.DefaultPoolSize, server.free, processes)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "a set of k replicas takes k generators at once, one per replica, %d/k connections each (the remainder to the first),\n"+
		"each rotating over all %d users from its own first user; its req/s is their sum, its latencies the worst of the k;\n"+
		"each replica of k runs with GOMAXPROCS %s, its share of the %d CPUs\n", cfg.conns, cfg.users, procsOfSets(), runtime.NumCPU())

	pg := &pgTargets{}
	for i := range pg.sets {
		k := i + 1
		name := fmt.Sprintf("PostgreSQL, %d replicas", k)
		if k == 1 {
			name = "PostgreSQL, 1 replica"
		}
		set := &target{name: name}
		env := []string{"GOMAXPROCS=" + strconv.Itoa(replicaProcs(k))}
		for r := range k {
			set.replicas = append(set.replicas, startServiceEnv(t, bin, fmt.Sprintf("%s #%d", name, r+1),
				filepath.Join(dir, fmt.Sprintf("pg%d-%d.log", k, r+1)), env,
				"-db", urls[i], "-pg-pool-size", strconv.Itoa(pool), "-cleanup-interval", time.Hour.String()))
		}
		if k == 1 {
			set = set.replicas[0]
			set.name = name
			// The flatness test's heavy user, as seed writes it to SQLite.
			start := time.Now()
			seedPostgres(t, urls[0], "heavy", cfg.heavy, time.Now().Add(-24*time.Hour+time.Minute), (24*time.Hour-2*time.Minute)/time.Duration(cfg.heavy))
			fmt.Fprintf(out, "seeded %d requests for the heavy user in PostgreSQL in %v\n", cfg.heavy, time.Since(start).Round(time.Millisecond))
		}
		pg.sets[i] = set
	}
	return pg
}

// replicaProcs is the GOMAXPROCS of each of k replicas sharing this
// machine: its share of the CPUs, at least one, as a container's CPU limit
// of that share would set it (Go reads the limit). With the default, every
// replica would run a P per CPU, and idle Ps wake threads that find
// nothing to do (the README's advice to operators).
func replicaProcs(k int) int {
	return max(runtime.NumCPU()/k, 1)
}

// procsOfSets describes replicaProcs for the sets of 1, 2 and 3 replicas.
func procsOfSets() string {
	var s []string
	for k := 1; k <= 3; k++ {
		s = append(s, strconv.Itoa(replicaProcs(k)))
	}
	return strings.Join(s, ", ") + " for 1, 2, 3 replicas"
}

type pgServer struct {
	version, host string
	free          int // connections free: max_connections less the reserved and those open
}

// pgSettings returns the server's version, address and free connections,
// and the settings that decide what a commit costs.
func pgSettings(t *testing.T, dsn string) (pgServer, string) {
	t.Helper()
	sdb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var s pgServer
	if u, err := url.Parse(dsn); err == nil {
		s.host = u.Host
	}
	var settings string
	if err := sdb.QueryRow(`SELECT current_setting('server_version'),
		'synchronous_commit=' || current_setting('synchronous_commit') || ', fsync=' || current_setting('fsync') ||
		', shared_buffers=' || current_setting('shared_buffers') || ', max_connections=' || current_setting('max_connections'),
		current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int -
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`,
	).Scan(&s.version, &settings, &s.free); err != nil {
		t.Fatal(err)
	}
	return s, settings
}

// seedPostgres writes n requests for user, who has none, directly to the
// requests table of the database at dsn: the first at from, then every
// spacing, numbered 1 to n, in the benchmark tier, as the service writes
// them. It then analyzes the table, as autovacuum soon would.
func seedPostgres(t *testing.T, dsn, user string, n int, from time.Time, spacing time.Duration) {
	t.Helper()
	ctx := context.Background()
	sdb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	from = from.Truncate(policy.Resolution)
	res, err := sdb.ExecContext(ctx, `INSERT INTO requests (user_id, ts, seq, tier_id)
		SELECT $1, $2::bigint + (g - 1) * $3::bigint, g, (SELECT id FROM tier_ids WHERE name = $4)
		FROM generate_series(1, $5::bigint) AS g`,
		user, from.UnixMicro(), spacing.Microseconds(), loadTier, n)
	if err != nil {
		t.Fatalf("seed PostgreSQL: %v", err)
	}
	if got, _ := res.RowsAffected(); got != int64(n) {
		t.Fatalf("seed PostgreSQL: %d rows written, want %d", got, n)
	}
	if _, err := sdb.ExecContext(ctx, `ANALYZE requests`); err != nil {
		t.Fatalf("seed PostgreSQL: %v", err)
	}
}

// runSet drives the replicas of set at once over conns connections in all
// for d, one generator per replica (see the top of this file), and
// returns their summed throughput and the worst of their latencies.
func (g *generator) runSet(t *testing.T, set *target, conns int, d time.Duration) result {
	t.Helper()
	k := len(set.replicas)
	shares := make([]int, k)
	for i := range shares {
		shares[i] = conns / k
	}
	shares[0] += conns % k
	users := len(g.bodies)
	res := make([]result, k)
	errs := make([]error, k)
	if g.wrk != "" {
		cmds := make([]*exec.Cmd, k)
		outs := make([]*bytes.Buffer, k)
		for i, r := range set.replicas {
			if shares[i] == 0 {
				continue
			}
			cmds[i], outs[i] = g.wrkCommand(r, shares[i], d, i*users/k)
			if err := cmds[i].Start(); err != nil {
				t.Fatalf("%s: wrk: %v", r.name, err)
			}
		}
		for i, cmd := range cmds {
			if cmd == nil {
				continue
			}
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("wrk: %v\n%s", err, outs[i])
			} else if res[i], err = wrkResult(outs[i].Bytes()); err != nil {
				errs[i] = fmt.Errorf("%v\n%s%s", err, outs[i], set.replicas[i].logErrors())
			}
		}
	} else {
		var wg sync.WaitGroup
		for i, r := range set.replicas {
			if shares[i] == 0 {
				continue
			}
			first := i * users / k
			reqs := append(g.bodies[first:len(g.bodies):len(g.bodies)], g.bodies[:first]...)
			wg.Go(func() { res[i], errs[i] = r.load(shares[i], d, 0, reqs) })
		}
		wg.Wait()
	}
	var sum result
	for i, r := range set.replicas {
		if errs[i] != nil {
			t.Fatalf("%s: %v", r.name, errs[i])
		}
		sum.rps += res[i].rps
		sum.checks += res[i].checks
		sum.p50, sum.p90, sum.p99 = max(sum.p50, res[i].p50), max(sum.p90, res[i].p90), max(sum.p99, res[i].p99)
		sum.p999, sum.max = max(sum.p999, res[i].p999), max(sum.max, res[i].max)
	}
	return sum
}

// ratios prints the PostgreSQL targets' throughput against SQLite's and
// each other's. The requirement sets no target for them.
func (pg *pgTargets) ratios(out io.Writer, results map[*target][]result, full, base *target) {
	one, two, three := pg.sets[0], pg.sets[1], pg.sets[2]
	for _, r := range []struct {
		name string
		a, b *target
	}{
		{"PostgreSQL 1 replica / SQLite FULL", one, full},
		{"2 replicas / 1 replica", two, one},
		{"3 replicas / 1 replica", three, one},
		{"PostgreSQL 1 replica / do-nothing", one, base},
	} {
		fmt.Fprintf(out, "%-36s %.3fx per round %v\n", r.name+":", medianRatio(results[r.a], results[r.b]), ratios(results[r.a], results[r.b]))
	}
}

// holds reports whether tg is one of the PostgreSQL targets.
func (pg *pgTargets) holds(tg *target) bool {
	return pg != nil && slices.Contains(pg.sets[:], tg)
}

func (pg *pgTargets) stop(t *testing.T) {
	t.Helper()
	for _, set := range pg.sets {
		set.stop(t)
	}
}

// busyUser drives one user through the three replicas at once, every
// connection checking the same user: each of that user's admissions takes
// the user's lock, so they are decided one at a time across replicas, and
// what one very busy user gets is what a batch of one user's admissions
// costs. The requirement: at least 2,000 checks a second.
func (pg *pgTargets) busyUser(t *testing.T, out io.Writer, cfg loadConfig, dir string) {
	t.Helper()
	sub := filepath.Join(dir, "busy")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	gen := newGenerator(t, sub, []string{"user-00000"})
	three := pg.sets[2]
	gen.run(t, three, cfg.conns, time.Second) // warm up
	var rs []result
	for range cfg.rounds {
		rs = append(rs, gen.run(t, three, cfg.conns, cfg.round))
	}
	m := medianResult(rs)
	fmt.Fprintf(out, "one busy user through %s, %d connections: %.0f checks/s, p99 %s (median of %d rounds %v)   target >= 2,000/s: %s\n",
		three.name, cfg.conns, m.rps, ms(m.p99), cfg.rounds, rates(rs), verdict(m.rps >= 2000))
}
