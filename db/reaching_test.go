package db

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// fillTokens writes rows as user's finished tokens and cost, in one
// transaction on a read connection.
func fillTokens(t testing.TB, s *Store, user string, rows []tokRow) {
	t.Helper()
	fillWith(t, s, qTokInsert, len(rows), func(i int) []any {
		r := rows[i]
		return []any{user, r.ts, r.tokens, r.total, r.cost, r.costTotal}
	})
}

// tokenRows returns n rows spaced as shape says, each holding tokens,
// cost or both, their running totals starting from what pruned rows left.
func tokenRows(rng *rand.Rand, shape rowShape, n int) []tokRow {
	ts := shapeRows(rng, shape, n)
	rows := make([]tokRow, n)
	total, costTotal := rng.Int64N(1e6), rng.Int64N(1e9)
	for i, at := range ts {
		r := tokRow{ts: at}
		switch rng.IntN(4) {
		case 0:
			r.cost = 1 + rng.Int64N(1e6)
		case 1:
			r.tokens = 1 + rng.Int64N(500)
		default:
			r.tokens, r.cost = 1+rng.Int64N(500), 1+rng.Int64N(1e6)
		}
		total, costTotal = total+r.tokens, costTotal+r.cost
		r.total, r.costTotal = total, costTotal
		rows[i] = r
	}
	return rows
}

// amountOf returns r's amount and running total of m.
func amountOf(r tokRow, m policy.Measure) (amount, total int64) {
	if m == policy.MeasureCost {
		return r.cost, r.costTotal
	}
	return r.tokens, r.total
}

// TestReachingMatchesSortedSlice: with no index on the running totals,
// SettledAt and OldestAfter find the row where a total reaches an amount
// by probing the key by time. On the spacings of nthShapes (bursts, long
// silences, gaps spanning most of int64, hundreds of rows at one instant),
// with rows of tokens, of cost and of both, they answer what a walk of the
// rows in order answers, on a read connection and in the writer, within
// twice the bits of the rows' span in statements (one probe of two at
// least halves it), and in a handful on average on steady traffic.
func TestReachingMatchesSortedSlice(t *testing.T) {
	ctx := context.Background()
	s := openNthStore(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, shape := range nthShapes {
		rows := tokenRows(rng, shape, 3000)
		fillTokens(t, s, shape.name, rows)
		bound := 2*bits.Len64(uint64(rows[len(rows)-1].ts-rows[0].ts)) + 4
		run := func(cq *countingQuerier) (worst, asked, sum int, err error) {
			l := &ledger{q: cq, user: shape.name}
			if l.st, err = loadLedger(cq, shape.name); err != nil {
				return 0, 0, 0, err
			}
			for _, m := range []policy.Measure{policy.MeasureTokens, policy.MeasureCost} {
				last := rows[len(rows)-1]
				_, lastTotal := amountOf(last, m)
				amount0, total0 := amountOf(rows[0], m)
				// n from 0 to below what all the rows hold (SettledAt's
				// contract), edges first.
				ns := []int64{0, 1, total0 - amount0 - 1 + (lastTotal - total0 + amount0), lastTotal - total0}
				for range 150 {
					ns = append(ns, rng.Int64N(lastTotal-total0+amount0))
				}
				for _, n := range ns {
					target := lastTotal - n
					want := -1
					for i, r := range rows {
						if _, v := amountOf(r, m); v >= target {
							want = i
							break
						}
					}
					cq.stmts = 0
					got, ok, err := l.SettledAt(m, n)
					if err != nil || !ok || got.UnixMicro() != rows[want].ts {
						return 0, 0, 0, fmt.Errorf("SettledAt(%v, %d) = %d, %v, %v; want %d (row %d)", m, n, got.UnixMicro(), ok, err, rows[want].ts, want)
					}
					worst, asked, sum = max(worst, cq.stmts), asked+1, sum+cq.stmts
				}
				for range 150 {
					cut := rows[rng.IntN(len(rows))].ts - rng.Int64N(3)
					want := int64(math.MinInt64)
					for _, r := range rows {
						if a, _ := amountOf(r, m); r.ts > cut && a > 0 {
							want = r.ts
							break
						}
					}
					cq.stmts = 0
					got, ok, err := l.OldestAfter(m, time.UnixMicro(cut))
					if err != nil || ok != (want != math.MinInt64) || ok && got.UnixMicro() != want {
						return 0, 0, 0, fmt.Errorf("OldestAfter(%v, %d) = %d, %v, %v; want %d", m, cut, got.UnixMicro(), ok, err, want)
					}
					worst, asked, sum = max(worst, cq.stmts), asked+1, sum+cq.stmts
				}
			}
			return worst, asked, sum, nil
		}
		for _, path := range []string{"read", "writer"} {
			var worst, asked, sum int
			var err error
			if path == "read" {
				tx, err := s.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				worst, asked, sum, err = run(&countingQuerier{q: readTx{ctx, tx, &s.reads}})
				tx.Rollback()
			} else {
				err = s.writer.do(ctx, func(tx *writeTx) error {
					var err error
					worst, asked, sum, err = run(&countingQuerier{q: tx})
					return err
				})
			}
			if err != nil {
				t.Fatalf("%s rows, %s: %v", shape.name, path, err)
			}
			t.Logf("%s, %s: %.1f statements on average, at most %d (bound %d)", shape.name, path, float64(sum)/float64(asked), worst, bound)
			if worst > bound {
				t.Errorf("%s rows, %s: %d statements, want at most %d", shape.name, path, worst, bound)
			}
			if mean := float64(sum) / float64(asked); shape.name == "steady" && mean > 4 {
				t.Errorf("steady traffic: %.1f statements on average, want interpolation to need few", mean)
			}
		}
	}
}
