package db

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Billing periods. The cleanup deletes a key's rows of requests and of
// finished tokens older than a day; in the same transaction as each
// delete it adds them to the totals of the billing period each fell in
// (period_totals), under the key's cycle as the database says then (its
// record's time zone and anchor, else its account's, else the store's
// default; see WithTimeZone), and moves the key's watermark of that table
// (period_marks). A month check then reads the current period's totals
// and both watermarks in one seek (PeriodTotals), and counts the rows
// after them as the windows do: exact, whenever the cleanup ran. On
// PostgreSQL the rollup takes the key's lock, as an admission does, so
// that no admission reads the totals of one side of a rollup and the rows
// of the other.

// periodsKeptFor is how long a period's totals are kept after it ends.
const periodsKeptFor = 13 // months

// WithTimeZone sets the time zone of the billing periods of keys whose
// records and accounts set none, as policy.WithTimeZone does for the
// service (default UTC): the cleanup buckets their rows by it.
func WithTimeZone(loc *time.Location) Option { return func(o *options) { o.timeZone = loc } }

// PeriodTotals implements policy.PeriodHistory: one seek of each table.
// The writer keeps what it read with the user's state.
func (h *history) PeriodTotals(start time.Time) (policy.PeriodUse, error) {
	if err := h.load(); err != nil {
		return policy.PeriodUse{}, err
	}
	if st := h.st; st != nil && st.period != nil && st.periodStart == start.UnixMicro() {
		return *st.period, nil
	}
	var reqTo, tokTo int64
	var u policy.PeriodUse
	err := h.q.queryRow(qPeriodUse, h.user, start.UnixMicro()).Scan(&reqTo, &tokTo, &u.Requests,
		&u.Amounts[policy.MeasureTokens], &u.Amounts[policy.MeasureCost])
	if err != nil {
		return u, unavailable(err)
	}
	if reqTo > 0 {
		u.RequestsTo = time.UnixMicro(reqTo)
	}
	if tokTo > 0 {
		u.AmountsTo = time.UnixMicro(tokTo)
	}
	if st := h.st; st != nil {
		st.period, st.periodStart, st.periodFirst = &u, start.UnixMicro(), firstRow{}
	}
	return u, nil
}

// Periods implements policy.PeriodLister.
func (s *Store) Periods(ctx context.Context, key string, before time.Time, limit int) ([]policy.PeriodTotals, error) {
	b := int64(1<<63 - 1)
	if !before.IsZero() {
		b = before.UnixMicro()
	}
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT period_start, period_end, requests, tokens, cost FROM period_totals
		WHERE key = ? AND period_start < ? ORDER BY period_start DESC LIMIT ?`), key, b, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []policy.PeriodTotals
	for rows.Next() {
		var start, end, cost int64
		var p policy.PeriodTotals
		if err := rows.Scan(&start, &end, &p.Requests, &p.Tokens, &cost); err != nil {
			return nil, unavailable(err)
		}
		p.Start, p.End, p.Cost = time.UnixMicro(start).UTC(), time.UnixMicro(end).UTC(), policy.Money(cost)
		out = append(out, p)
	}
	return out, unavailable(rows.Err())
}

// rollup is what one table's rows add to their periods.
type rollup struct {
	table string // "requests" or "call_tokens"
	// sums are the columns added to period_totals, and what they sum.
	sums, of string
	mark     string // the watermark's column
}

var (
	requestsRollup = rollup{"requests", "requests", "count(*), 0, 0", "requests_to"}
	tokensRollup   = rollup{"call_tokens", "tokens, cost", "0, CAST(coalesce(sum(tokens), 0) AS BIGINT), CAST(coalesce(sum(cost), 0) AS BIGINT)", "tokens_to"}
)

// rollUp adds key's rows of r's table at or before bound to their periods'
// totals, under the key's billing cycle (def where the database sets
// none), and moves the key's watermark to bound: to run in the
// transaction that deletes those rows, holding the key's lock.
func (tx *writeTx) rollUp(r rollup, key string, bound int64, def policy.BillingCycle) error {
	var oldest sql.NullInt64
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT min(ts) FROM `+r.table+` WHERE user_id = ? AND ts <= ?`), key, bound).Scan(&oldest)
	if err != nil {
		return unavailable(err)
	}
	if !oldest.Valid {
		return nil
	}
	cycle, err := tx.cycleOf(key, def)
	if err != nil {
		return err
	}
	for p := cycle.Period(time.UnixMicro(oldest.Int64)); p.Start.UnixMicro() <= bound; p = cycle.Period(p.End) {
		var n, tokens, cost int64
		err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT `+r.of+` FROM `+r.table+` WHERE user_id = ? AND ts >= ? AND ts < ? AND ts <= ?`),
			key, p.Start.UnixMicro(), p.End.UnixMicro(), bound).Scan(&n, &tokens, &cost)
		if err != nil {
			return unavailable(err)
		}
		if r.table == "requests" && n == 0 || r.table != "requests" && tokens == 0 && cost == 0 {
			continue
		}
		_, err = tx.conn.ExecContext(tx.ctx, tx.d.bind(`INSERT INTO period_totals (key, period_start, period_end, requests, tokens, cost)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key, period_start) DO UPDATE SET
			requests = period_totals.requests + excluded.requests, tokens = period_totals.tokens + excluded.tokens,
			cost = period_totals.cost + excluded.cost`),
			key, p.Start.UnixMicro(), p.End.UnixMicro(), n, tokens, cost)
		if err != nil {
			return unavailable(err)
		}
	}
	_, err = tx.conn.ExecContext(tx.ctx, tx.d.bind(`INSERT INTO period_marks (key, `+r.mark+`) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET `+r.mark+` = excluded.`+r.mark), key, bound)
	return unavailable(err)
}

// cycleOf returns the billing cycle of key as the database has it: an
// account's own for its pool, else the user's record's, else its
// account's, field by field, else def (see policy.UserRecord.Cycle).
func (tx *writeTx) cycleOf(key string, def policy.BillingCycle) (policy.BillingCycle, error) {
	var rz, az sql.NullString
	var ra, aa sql.NullInt64
	var err error
	if policy.IsAccountKey(key) {
		err = tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT time_zone, billing_anchor FROM accounts WHERE account_id = ?`),
			key[len(policy.AccountKeyPrefix):]).Scan(&az, &aa)
	} else {
		err = tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT u.time_zone, u.billing_anchor, a.time_zone, a.billing_anchor
			FROM users u LEFT JOIN accounts a ON a.account_id = u.account WHERE u.user_id = ?`), key).Scan(&rz, &ra, &az, &aa)
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return def, unavailable(err)
	}
	r := &policy.UserRecord{TimeZone: rz.String, BillingAnchor: int(ra.Int64)}
	a := &policy.Account{TimeZone: az.String, BillingAnchor: int(aa.Int64)}
	c, err := r.Cycle(a, def)
	if err != nil {
		// A name the zone database no longer knows: the default's
		// periods, rather than rows never pruned.
		return def, nil
	}
	return c, nil
}

// prunePeriods deletes the totals of periods that ended more than
// periodsKeptFor months before now.
func (s *Store) prunePeriods(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.writer.do(ctx, func(tx *writeTx) error {
		res, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM period_totals WHERE period_end < ?`),
			now.AddDate(0, -periodsKeptFor, 0).UnixMicro())
		if err != nil {
			return unavailable(err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
