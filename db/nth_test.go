package db

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// rowShape describes how one test user's requests are spaced: gap returns
// the microseconds between request i-1 and request i.
type rowShape struct {
	name string
	n    int
	gap  func(rng *rand.Rand, i int) int64
}

// nthShapes are spacings that interpolation finds easy (steady), hard
// (rows ever sparser, or bursts of microseconds between long silences),
// that span most of int64, or that put many rows at one instant.
var nthShapes = []rowShape{
	{"steady", 0, func(rng *rand.Rand, _ int) int64 { return 432_000 + rng.Int64N(864_000) }},
	{"gaps", 0, func(rng *rand.Rand, _ int) int64 {
		if rng.IntN(500) == 0 {
			return (1 + rng.Int64N(10)) * int64(time.Hour/time.Microsecond)
		}
		return 1000 + rng.Int64N(5000)
	}},
	{"bursts", 0, func(rng *rand.Rand, _ int) int64 {
		if rng.IntN(1500) == 0 {
			return 1 + rng.Int64N(int64(30*time.Minute/time.Microsecond))
		}
		return 1 + rng.Int64N(20)
	}},
	{"sparser", 0, func(_ *rand.Rand, i int) int64 { return 1 + int64(math.Pow(1.0008, float64(min(i, 20_000)))) }},
	// Gaps doubling every 300 rows: after 15,000 rows, 2^50 µs apart.
	{"doubling", 0, func(_ *rand.Rand, i int) int64 { return int64(math.Exp2(float64(min(i, 15_000)) / 300)) }},
	// Runs of a few hundred requests at one instant, as under a clock that
	// stands still, a minute or less apart.
	{"instants", 0, func(rng *rand.Rand, _ int) int64 {
		if rng.IntN(300) == 0 {
			return 1 + rng.Int64N(int64(time.Minute/time.Microsecond))
		}
		return 0
	}},
	// A third of the requests at the instant of the one before.
	{"ties", 0, func(rng *rand.Rand, _ int) int64 {
		if rng.IntN(3) == 0 {
			return 0
		}
		return 1 + rng.Int64N(2000)
	}},
}

// fillRows writes ts as user's rows, numbered from 1, in one transaction on
// a read connection: another connection, so the writer drops its cache.
func fillRows(t testing.TB, s *Store, user string, ts []int64) {
	t.Helper()
	fillWith(t, s, qInsert, len(ts), func(i int) []any { return []any{user, ts[i], i + 1, nil} })
}

// fillWith runs q n times, with args(i) the i-th time, in one transaction
// on a read connection.
func fillWith(t testing.TB, s *Store, q query, n int, args func(i int) []any) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, queries[q])
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := st.ExecContext(ctx, args(i)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// shapeRows returns n timestamps spaced as shape says, from w0.
func shapeRows(rng *rand.Rand, shape rowShape, n int) []int64 {
	ts := make([]int64, n)
	at := w0.UnixMicro()
	for i := range ts {
		if i > 0 {
			at += max(shape.gap(rng, i), 0)
		}
		ts[i] = at
	}
	return ts
}

// nthRef answers NthAfter from a sorted slice: ok is false when fewer than
// k timestamps are after t.
func nthRef(r []int64, t time.Time, k int64) (int64, bool) {
	c := t.UnixMicro()
	i := sort.Search(len(r), func(i int) bool { return r[i] > c })
	if k < 1 || k > int64(len(r)-i) {
		return 0, false
	}
	return r[i+int(k)-1], true
}

// nthCases returns cutoffs and ks to ask r about: cutoffs before, at, just
// around, between and after its rows; ks at the edges of the OFFSET path,
// of the count, past it, and at random.
func nthCases(rng *rand.Rand, r []int64, n int) (cuts []time.Time, ks []int64) {
	micro := func(v int64) time.Time { return time.UnixMicro(v) }
	cuts = []time.Time{time.Time{}, micro(w0.UnixMicro() - 1)}
	if len(r) > 0 {
		last := r[len(r)-1]
		cuts = append(cuts, micro(r[0]-1), micro(r[0]), micro(last-1), micro(last), micro(last+1), micro(last+int64(48*time.Hour/time.Microsecond)))
	}
	for len(cuts) < n {
		if len(r) == 0 {
			cuts = append(cuts, micro(w0.UnixMicro()+rng.Int64N(1e12)))
			continue
		}
		v := r[rng.IntN(len(r))]
		switch rng.IntN(4) {
		case 0:
		case 1:
			v--
		case 2:
			v++
		default:
			v = r[0] + rng.Int64N(r[len(r)-1]-r[0]+1)
		}
		cuts = append(cuts, micro(v))
	}
	ks = []int64{1, 2, nthOffsetMax - 1, nthOffsetMax, nthOffsetMax + 1, nthOffsetMax + 2, 100, math.MaxInt64}
	for _, d := range []int64{-nthOffsetMax - 2, -nthOffsetMax - 1, -nthOffsetMax, -2, -1, 0, 1, 2, 50} {
		if k := int64(len(r)) + d; k >= 1 {
			ks = append(ks, k)
		}
	}
	for range n {
		ks = append(ks, 1+rng.Int64N(int64(len(r))+1))
	}
	return cuts, ks
}

// checkNth compares h.NthAfter with the slice for every cutoff and k. For
// each cutoff, ks is also asked relative to the count after it.
func checkNth(h policy.History, r []int64, cuts []time.Time, ks []int64) error {
	for _, cut := range cuts {
		n, err := h.CountAfter(cut)
		if err != nil {
			return err
		}
		rel := []int64{n - nthOffsetMax - 2, n - nthOffsetMax - 1, n - nthOffsetMax, n - nthOffsetMax + 1, n - 1, n, n + 1, n / 2, n/2 + 1}
		for _, k := range append(ks, rel...) {
			if k < 1 {
				continue // outside the contract
			}
			got, err := h.NthAfter(cut, k)
			want, ok := nthRef(r, cut, k)
			switch {
			case !ok && err == nil:
				return fmt.Errorf("NthAfter(%d, %d) = %d with %d rows after it, want an error", cut.UnixMicro(), k, got.UnixMicro(), n)
			case !ok && k > 1 && policy.ErrorCode(err) != policy.EUNAVAILABLE:
				return fmt.Errorf("NthAfter(%d, %d) with %d rows after it: %v, want the OFFSET query's no rows", cut.UnixMicro(), k, n, err)
			case ok && err != nil:
				return fmt.Errorf("NthAfter(%d, %d): %v, want %d", cut.UnixMicro(), k, err, want)
			case ok && got.UnixMicro() != want:
				return fmt.Errorf("NthAfter(%d, %d) = %d, want %d", cut.UnixMicro(), k, got.UnixMicro(), want)
			}
		}
	}
	return nil
}

// TestNthAfterMatchesSortedSlice asks NthAfter about users of every shape,
// on a read connection and in the writer (whose caches answer part of it),
// for cutoffs and ks of every kind, and compares with a sorted slice: before
// and after pruning removed the oldest rows (so numbers no longer start at
// 1), and around admissions that extend the writer's cursors after it
// searched.
// openNthStore opens a store for the k-th row tests. They check answers
// and count statements on one goroutine, and the race detector slows
// SQLite tenfold: minutes under -race for nothing it could find, so they
// skip there; the plain go test runs them.
func openNthStore(t *testing.T) *Store {
	t.Helper()
	if dbtest.RaceEnabled {
		t.Skip("slow under -race, and single-goroutine")
	}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "test.db"), WithSynchronous(SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNthAfterMatchesSortedSlice(t *testing.T) {
	ctx := context.Background()
	s := openNthStore(t)
	rng := rand.New(rand.NewPCG(5, 6))
	ref := map[string][]int64{}
	var users []string
	for _, shape := range nthShapes {
		for _, n := range []int{0, 1, nthOffsetMax, nthOffsetMax + 1, 2*nthOffsetMax + 3, 3000} {
			u := fmt.Sprintf("%s-%d", shape.name, n)
			users = append(users, u)
			ref[u] = shapeRows(rng, shape, n)
			fillRows(t, s, u, ref[u])
		}
	}
	check := func(stage string) {
		t.Helper()
		for _, u := range users {
			r := ref[u]
			cuts, ks := nthCases(rng, r, 40)
			if err := s.View(ctx, u, func(h policy.History) error { return checkNth(h, r, cuts, ks) }); err != nil {
				t.Fatalf("%s: view of %s: %v", stage, u, err)
			}
			// In the writer, after a Prefetch of some cutoffs as Evaluate
			// does, then a recorded admission after the searches, whose
			// counts must come out right from the caches.
			var pre [len(policy.Windows)]time.Time
			copy(pre[:], cuts[len(cuts)-len(pre):])
			for round := range 2 {
				err := s.Admit(ctx, u, func(h policy.History) (policy.Admission, error) {
					if err := h.Prefetch(&pre); err != nil {
						return policy.Admission{}, err
					}
					if err := checkNth(h, r, cuts, ks); err != nil {
						return policy.Admission{}, err
					}
					if round == 0 {
						return policy.Admission{}, nil
					}
					at := w0
					if len(r) > 0 {
						at = time.UnixMicro(r[len(r)-1] + 1 + rng.Int64N(1000))
					}
					r = append(r, at.UnixMicro())
					return policy.Admission{At: at, Record: true}, nil
				})
				if err != nil {
					t.Fatalf("%s: admission %d of %s: %v", stage, round, u, err)
				}
			}
			ref[u] = r
			err := s.Admit(ctx, u, func(h policy.History) (policy.Admission, error) {
				return policy.Admission{}, checkNth(h, r, cuts, ks)
			})
			if err != nil {
				t.Fatalf("%s: admission after recording for %s: %v", stage, u, err)
			}
		}
	}
	check("filled")
	// Prune the oldest rows: every user loses its rows before the bound, so
	// its numbers start past 1 (or it keeps none).
	for _, frac := range []float64{0.1, 0.5} {
		r := ref["steady-3000"]
		bound := r[int(frac*float64(len(r)))]
		if _, err := s.Prune(ctx, time.UnixMicro(bound)); err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			r := ref[u]
			ref[u] = r[sort.Search(len(r), func(i int) bool { return r[i] > bound }):]
		}
		check(fmt.Sprintf("pruned to %d", bound))
	}
}

// countingQuerier counts the statements a history runs, and the rows OFFSET
// steps over: the cost of an answer, measured without a clock.
type countingQuerier struct {
	q       rowQuerier
	stmts   int
	stepped int64
}

func (c *countingQuerier) queryRow(q query, args ...any) *sql.Row {
	c.count(q, args)
	return c.q.queryRow(q, args...)
}

func (c *countingQuerier) query(q query, args ...any) (*sql.Rows, error) {
	c.count(q, args)
	return c.q.query(q, args...)
}

func (c *countingQuerier) count(q query, args []any) {
	c.stmts++
	if q == qNthAfter {
		c.stepped += args[2].(int64)
	}
}

// TestNthAfterCostDoesNotGrowWithK counts the statements NthAfter runs and
// the rows it steps over, for every k from 1 to the count of users with
// 100,000 rows, on a read connection and in the writer. A k past the OFFSET
// path costs a bounded number of seeks, set by the span of timestamps and
// not by k, and steps over at most nthOffsetMax rows; on steady traffic,
// interpolation makes it a handful. OFFSET alone would step over k-1.
func TestNthAfterCostDoesNotGrowWithK(t *testing.T) {
	ctx := context.Background()
	s := openNthStore(t)
	rng := rand.New(rand.NewPCG(7, 8))
	sizes := map[string]int{"steady": 100_000, "gaps": 100_000, "bursts": 100_000, "sparser": 20_000, "doubling": 16_000,
		"instants": 100_000, "ties": 100_000}
	for _, shape := range nthShapes {
		r := shapeRows(rng, shape, sizes[shape.name])
		fillRows(t, s, shape.name, r)
		// Of two probes in a row, one at least halves the span of
		// timestamps, so the probes are at most twice its bits; plus the
		// oldest row after the cutoff (not prefetched here) and OFFSET.
		bound := 2*bits.Len64(uint64(r[len(r)-1]-r[0])) + 2
		cuts := []time.Time{time.UnixMicro(r[0] - 1), time.UnixMicro(r[len(r)/3]), time.UnixMicro(r[len(r)*2/3] + 1)}
		for _, path := range []string{"read", "writer"} {
			var worst, total, asked int
			var worstK int64
			for _, cut := range cuts {
				c := sort.Search(len(r), func(i int) bool { return r[i] > cut.UnixMicro() })
				n := int64(len(r) - c)
				ks := []int64{nthOffsetMax + 1, 1000, n / 2, n - 1000, n - nthOffsetMax - 1, n - 1, n}
				for range 300 {
					ks = append(ks, nthOffsetMax+1+rng.Int64N(n-nthOffsetMax))
				}
				run := func(h *history, cq *countingQuerier) error {
					if _, _, err := h.Last(); err != nil { // known to Evaluate before it asks
						return err
					}
					for _, k := range ks {
						cq.stmts, cq.stepped = 0, 0
						got, err := h.NthAfter(cut, k)
						if err != nil {
							return fmt.Errorf("NthAfter(%d, %d): %v", cut.UnixMicro(), k, err)
						}
						if want := r[c+int(k)-1]; got.UnixMicro() != want {
							return fmt.Errorf("NthAfter(%d, %d) = %d, want %d", cut.UnixMicro(), k, got.UnixMicro(), want)
						}
						if cq.stepped > nthOffsetMax {
							return fmt.Errorf("NthAfter(%d, %d) stepped over %d rows with OFFSET, want at most %d", cut.UnixMicro(), k, cq.stepped, nthOffsetMax)
						}
						if cq.stmts > bound {
							return fmt.Errorf("NthAfter(%d, %d) ran %d statements, want at most %d", cut.UnixMicro(), k, cq.stmts, bound)
						}
						if cq.stmts > worst {
							worst, worstK = cq.stmts, k
						}
						total += cq.stmts
						asked++
					}
					return nil
				}
				var err error
				if path == "read" {
					// What View does, on a counted transaction.
					tx, err := s.db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					cq := &countingQuerier{q: readTx{ctx, tx, &s.reads}}
					err = run(&history{q: cq, user: shape.name}, cq)
					tx.Rollback()
				} else {
					err = s.writer.do(ctx, func(tx *writeTx) error {
						cq := &countingQuerier{q: tx}
						var h history
						h.reset(cq, tx, shape.name)
						return run(&h, cq)
					})
				}
				if err != nil {
					t.Fatalf("%s rows, %s: %v", shape.name, path, err)
				}
			}
			mean := float64(total) / float64(asked)
			t.Logf("%s (%d rows), %s: %.1f statements on average, at most %d (k=%d, bound %d)", shape.name, len(r), path, mean, worst, worstK, bound)
			if shape.name == "steady" && worst > 6 {
				t.Errorf("steady traffic: at most %d statements (k=%d), want interpolation to need few", worst, worstK)
			}
		}
	}
}

// BenchmarkNthAfterShapes measures NthAfter on a read connection for
// 100,000 rows of each shape, at random k past the OFFSET path, with the
// statements per call as a metric.
func BenchmarkNthAfterShapes(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), WithSynchronous(SyncNormal))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(9, 10))
	for _, shape := range nthShapes {
		n := 100_000
		if shape.name == "doubling" {
			n = 16_000
		}
		r := shapeRows(rng, shape, n)
		fillRows(b, s, shape.name, r)
		cut := time.UnixMicro(r[0] - 1)
		b.Run(shape.name, func(b *testing.B) {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Rollback()
			cq := &countingQuerier{q: readTx{ctx, tx, &s.reads}}
			h := &history{q: cq, user: shape.name}
			if _, err := h.CountAfter(cut); err != nil {
				b.Fatal(err)
			}
			cq.stmts = 0
			for b.Loop() {
				k := nthOffsetMax + 1 + rng.Int64N(int64(n-nthOffsetMax))
				if _, err := h.NthAfter(cut, k); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cq.stmts)/float64(b.N), "stmts/op")
		})
	}
}
