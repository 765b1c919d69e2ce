package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/policyguard/policyguard/policy"
)

// ledgerOf returns user's ledger state as the writer caches it, loading it
// when needed. The caller may change it: the user is touched, so a rollback
// forgets it.
func (tx *writeTx) ledgerOf(st *userState, user string) (*ledgerState, error) {
	if st.calls == nil {
		l, err := loadLedger(tx, user)
		if err != nil {
			return nil, err
		}
		switch {
		case l.open == 0:
			l.listed = true
		case l.open <= maxListedCalls:
			if l.openCalls, err = expiredCalls(tx, user, math.MaxInt64); err != nil {
				return nil, err
			}
			l.listed = int64(len(l.openCalls)) == l.open
		}
		st.calls = &l
	}
	return st.calls, nil
}

// cmpCall orders open calls as they are settled: by expiry, then id.
func cmpCall(a, b expiredCall) int {
	if c := cmp.Compare(a.expiresAt, b.expiresAt); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// listOpen adds c to the list of open calls, if they are listed.
func (l *ledgerState) listOpen(c expiredCall) {
	if !l.listed {
		return
	}
	if len(l.openCalls) >= maxListedCalls {
		l.listed, l.openCalls = false, nil
		return
	}
	i, _ := slices.BinarySearchFunc(l.openCalls, c, cmpCall)
	l.openCalls = slices.Insert(l.openCalls, i, c)
}

// unlistOpen removes c from the list of open calls, if they are listed.
func (l *ledgerState) unlistOpen(c expiredCall) {
	if !l.listed {
		if l.open == 0 {
			l.listed, l.openCalls = true, l.openCalls[:0]
		}
		return
	}
	if i, ok := slices.BinarySearchFunc(l.openCalls, c, cmpCall); ok {
		l.openCalls = slices.Delete(l.openCalls, i, i+1)
	}
}

// userOf returns user's cached state, creating it (with its requests
// unknown, so the next admission reads them) when there is none.
func (tx *writeTx) userOf(user string) (*userState, error) {
	if st := tx.cachedUser(user); st != nil {
		tx.touch(user)
		return st, nil
	}
	h := &history{q: tx, tx: tx, user: user}
	if err := h.load(); err != nil {
		return nil, err
	}
	return h.st, nil
}

// settle finishes user's open calls that expired at or before now, each at
// its expiry with its reservation, in expiry order, and returns the ledger
// state after it. Rows of finished tokens are written in time order, so
// this runs before any write of new ones.
func (tx *writeTx) settle(st *userState, user string, now int64) (*ledgerState, error) {
	l, err := tx.ledgerOf(st, user)
	if err != nil || l.nextExpiry > now {
		return l, err
	}
	var expired []expiredCall
	if l.listed {
		n := 0
		for n < len(l.openCalls) && l.openCalls[n].expiresAt <= now {
			n++
		}
		expired = l.openCalls[:n:n]
		l.openCalls = l.openCalls[n:]
	} else if expired, err = expiredCalls(tx, user, now); err != nil {
		return nil, err
	}
	for _, c := range expired {
		at := l.countAt(c.expiresAt)
		if r, ok := l.add(c.expiresAt, c.reserved, c.reservedCost); ok {
			if err := tx.insertRow(user, r); err != nil {
				return nil, err
			}
		}
		if _, err := tx.exec(qCallSettle, at, c.id); err != nil {
			return nil, unavailable(err)
		}
	}
	for _, c := range expired {
		l.open--
		l.reserved[policy.MeasureTokens] -= c.reserved
		l.reserved[policy.MeasureCost] -= c.reservedCost
	}
	if !l.listed && l.open == 0 {
		l.listed, l.openCalls = true, nil
	}
	return l, tx.nextExpiry(l, user)
}

// insertRow stores r, a row of user's finished amounts.
func (tx *writeTx) insertRow(user string, r tokRow) error {
	if _, err := tx.exec(qTokInsert, user, r.ts, r.tokens, r.total, r.cost, r.costTotal); err != nil {
		return unavailable(err)
	}
	return nil
}

// nextExpiry finds the earliest expiry of user's open calls: in the list
// of them, or one seek.
func (tx *writeTx) nextExpiry(l *ledgerState, user string) error {
	l.nextExpiry = noExpiry
	if l.open == 0 {
		return nil
	}
	if l.listed {
		if len(l.openCalls) > 0 {
			l.nextExpiry = l.openCalls[0].expiresAt
		}
		return nil
	}
	if err := tx.queryRow(qNextExpiry, user).Scan(&l.nextExpiry); err != nil {
		return unavailable(err)
	}
	return nil
}

// openCall stores c, opened by the admission h just recorded.
func (tx *writeTx) openCall(h *history, c *policy.Call) error {
	if !policy.ValidCallID(c.ID) {
		return policy.Errorf(policy.EINTERNAL, "call id %q is not URL-safe", c.ID)
	}
	l, err := tx.ledgerOf(h.st, h.user)
	if err != nil {
		return err
	}
	exp := c.ExpiresAt.UnixMicro()
	p := pricedRowOf(c)
	if _, err := tx.exec(qCallInsert, c.ID, h.user, c.Tier, c.Reserved, c.OpenedAt.UnixMicro(), exp, nullText(c.Account),
		nullText(c.Model), nullText(c.Upstream), p.version, p.model, p.upstream, p.input, p.output, p.cacheRead, p.cacheWrite,
		int64(c.ReservedCost), nullText(c.RunID)); err != nil {
		return unavailable(err)
	}
	l.open++
	l.reserved[policy.MeasureTokens] += c.Reserved
	l.reserved[policy.MeasureCost] += int64(c.ReservedCost)
	l.nextExpiry = min(l.nextExpiry, exp)
	l.listOpen(expiredCall{id: c.ID, reserved: c.Reserved, reservedCost: int64(c.ReservedCost), expiresAt: exp})
	return nil
}

// nullText is s, or NULL when empty.
func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// pricedRow is how a call is priced, as its row of calls keeps it: every
// column NULL for a call without a price.
type pricedRow struct {
	version                              sql.NullInt64
	model, upstream                      sql.NullString
	input, output, cacheRead, cacheWrite sql.NullInt64
}

// pricedRowOf returns c's pricing as its row keeps it.
func pricedRowOf(c *policy.Call) pricedRow {
	p := c.Price
	if p == nil {
		return pricedRow{}
	}
	n := func(m policy.Money) sql.NullInt64 { return sql.NullInt64{Int64: int64(m), Valid: true} }
	return pricedRow{version: sql.NullInt64{Int64: c.PriceVersion, Valid: true},
		model: sql.NullString{String: p.Model, Valid: true}, upstream: sql.NullString{String: p.Upstream, Valid: true},
		input: n(p.Input), output: n(p.Output), cacheRead: n(p.CacheRead), cacheWrite: n(p.CacheWrite)}
}

// callRow is a row of calls.
type callRow struct {
	user, tier                    string
	reserved, openedAt, expiresAt int64
	finishedAt, tokens, reported  sql.NullInt64
	expired                       bool
	account                       sql.NullString // whose pool the call also counts in
	model, upstream               sql.NullString
	price                         pricedRow
	reservedCost                  int64
	cost, reportedCost            sql.NullInt64
}

// pricingDest returns where a scan of the columns of calls from model to
// reported_cost goes, in their order.
func (r *callRow) pricingDest() []any {
	return []any{&r.model, &r.upstream, &r.price.version, &r.price.model, &r.price.upstream,
		&r.price.input, &r.price.output, &r.price.cacheRead, &r.price.cacheWrite, &r.reservedCost, &r.cost, &r.reportedCost}
}

func getCall(q rowQuerier, id string) (callRow, error) {
	var r callRow
	err := q.queryRow(qCallGet, id).Scan(append([]any{&r.user, &r.tier, &r.reserved, &r.openedAt, &r.expiresAt,
		&r.finishedAt, &r.tokens, &r.reported, &r.expired, &r.account}, r.pricingDest()...)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	case err != nil:
		return r, unavailable(err)
	}
	return r, nil
}

// lockedCall reads the call named id with its user's lock held (see
// lockUser), and its account's pool's first for a member's call: on
// PostgreSQL it reads the call, takes the locks, and reads the call again,
// as it stands once no other write of the user can change it.
func (tx *writeTx) lockedCall(id string) (callRow, error) {
	r, err := getCall(tx, id)
	if err != nil || tx.w != nil {
		return r, err
	}
	if r.account.Valid {
		if err := tx.lockUser(policy.AccountKey(r.account.String)); err != nil {
			return r, err
		}
	}
	if err := tx.lockUser(r.user); err != nil {
		return r, err
	}
	return getCall(tx, id)
}

// callerCall is lockedCall for a call its caller names: ENOTFOUND for the
// copy of a member's call in its account's pool (policy.PoolCallID), which
// is finished and kept alive with the call and never alone. Finished
// alone, say with no tokens, it would free the pool's slot and budget
// while the call went on.
func (tx *writeTx) callerCall(id string) (callRow, error) {
	r, err := tx.lockedCall(id)
	if err == nil && policy.IsAccountKey(r.user) {
		return callRow{}, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	}
	return r, err
}

func (r *callRow) call(id string) policy.Call {
	c := policy.Call{
		ID: id, UserID: r.user, Tier: r.tier, Reserved: r.reserved,
		Account:   r.account.String,
		OpenedAt:  time.UnixMicro(r.openedAt).UTC(),
		ExpiresAt: time.UnixMicro(r.expiresAt).UTC(),
		Expired:   r.expired,
		Model:     r.model.String, Upstream: r.upstream.String,
		ReservedCost: policy.Money(r.reservedCost),
	}
	if p := &r.price; p.input.Valid {
		c.PriceVersion = p.version.Int64
		c.Price = &policy.Price{Model: p.model.String, Upstream: p.upstream.String,
			Input: policy.Money(p.input.Int64), Output: policy.Money(p.output.Int64),
			CacheRead: policy.Money(p.cacheRead.Int64), CacheWrite: policy.Money(p.cacheWrite.Int64)}
	}
	if r.finishedAt.Valid {
		c.FinishedAt = time.UnixMicro(r.finishedAt.Int64).UTC()
		c.Tokens = r.tokens.Int64
		c.Cost = policy.Money(r.cost.Int64)
	}
	if r.reported.Valid {
		n := r.reported.Int64
		c.Reported = &n
		c.ReportedCost = policy.Money(r.reportedCost.Int64)
	}
	return c
}

// FinishCall implements policy.RequestStore.
func (s *Store) FinishCall(ctx context.Context, id string, rep policy.Report, now time.Time) (policy.Call, error) {
	if pw, ok := s.writer.(*pgWriter); ok {
		refused := func(r callRow) error { return finishedAlready(id, &r) }
		// finish_one prices the report as policy.Call.Settle does.
		var tokens any // NULL: the reservation
		var usage [4]any
		switch u := rep.Usage; {
		case u != nil:
			tokens, usage = u.Total(), [4]any{u.Input, u.Output, u.CacheRead, u.CacheWrite}
		case rep.Tokens != nil:
			tokens = *rep.Tokens
		}
		return pw.callStatement(ctx, id, refused, `SELECT * FROM finish_call($1, $2, $3, $4, $5, $6, $7)`,
			id, tokens, usage[0], usage[1], usage[2], usage[3], now.UnixMicro())
	}
	var c policy.Call
	err := s.writer.do(ctx, func(tx *writeTx) error {
		var err error
		if c, err = tx.finishCall(id, rep, now.UnixMicro(), tx.callerCall); err != nil || c.Account == "" {
			return err
		}
		// The same call in its account's pool, whose lock lockedCall
		// took: finished with it, unless the pool was forgotten.
		_, err = tx.finishCall(policy.PoolCallID(id), rep, now.UnixMicro(), tx.lockedCall)
		if policy.ErrorCode(err) == policy.ENOTFOUND {
			err = nil
		}
		return err
	})
	return c, err
}

// callStatement runs one of migration 14's functions on PostgreSQL,
// finish_call or keepalive_call, for the call named id: what FinishCall
// and KeepAlive do on SQLite, for the call and its pool's copy, with the
// same locks in the same order, in one statement and so one round trip,
// where their transactions took about a dozen and six. refused is the
// error of the function's status 2, given the call as it stands.
//
// BenchmarkCallPostgres, before and after, alternated: with one caller a
// finish took 1.6 to 3.1 ms, then 0.54 to 0.78; with 16 callers a call
// (check and finish) cost 403 to 418 µs of the service's CPU, then 158
// to 168.
//
// Unlike admissions, finishes are not batched into one statement: the
// server already shares one WAL flush among commits that arrive together,
// and a batch made every finish wait for the one before it
// (BenchmarkCallPostgres, 16 callers: a finish took 4.0 to 4.4 ms, not
// 2.2 to 2.5, for no more calls a second).
func (w *pgWriter) callStatement(ctx context.Context, id string, refused func(callRow) error, query string, args ...any) (policy.Call, error) {
	if err := w.enter(); err != nil {
		return policy.Call{}, err
	}
	defer w.running.Done()
	var status int16
	var r callRow
	var user, tier sql.NullString
	var reserved, openedAt, expiresAt, expired, reservedCost sql.NullInt64
	dest := append([]any{&status, &user, &tier, &reserved, &openedAt, &expiresAt, &r.finishedAt, &r.tokens, &r.reported, &expired, &r.account},
		r.pricingDest()...)
	dest[len(dest)-3] = &reservedCost // NULL with no call
	err := w.db.QueryRowContext(ctx, query, args...).Scan(dest...)
	r.user, r.tier, r.reserved, r.openedAt, r.expiresAt = user.String, tier.String, reserved.Int64, openedAt.Int64, expiresAt.Int64
	r.expired, r.reservedCost = expired.Int64 != 0, reservedCost.Int64
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "PG409": // a pool's copy finished otherwise
		return policy.Call{}, policy.Errorf(policy.ECONFLICT, "%s", pgErr.Message)
	case err != nil:
		return policy.Call{}, unavailable(err)
	case status == 1:
		return policy.Call{}, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	case status == 2:
		return policy.Call{}, refused(r)
	}
	return r.call(id), nil
}

// finishedAlready is the error of a finish that contradicts the one its
// call had.
func finishedAlready(id string, r *callRow) error {
	if r.price.input.Valid {
		return policy.Errorf(policy.ECONFLICT, "call %q already finished with %d tokens costing $%s", id, r.reported.Int64, policy.Money(r.reportedCost.Int64))
	}
	return policy.Errorf(policy.ECONFLICT, "call %q already finished with %d tokens", id, r.reported.Int64)
}

// finishCall finishes the call named id, read (and locked) by read.
func (tx *writeTx) finishCall(id string, rep policy.Report, now int64, read func(id string) (callRow, error)) (policy.Call, error) {
	r, err := read(id)
	if err != nil {
		return policy.Call{}, err
	}
	c := r.call(id)
	count, money := c.Settle(rep)
	cost := int64(money)
	if r.reported.Valid {
		// Finished by its caller already: a retry, or a contradiction.
		if r.reported.Int64 != count || r.reportedCost.Int64 != cost {
			return policy.Call{}, finishedAlready(id, &r)
		}
		return c, nil
	}
	st, err := tx.userOf(r.user)
	if err != nil {
		return policy.Call{}, err
	}
	l, err := tx.settle(st, r.user, now)
	if err != nil {
		return policy.Call{}, err
	}
	if !r.finishedAt.Valid && r.expiresAt <= now {
		if r, err = getCall(tx, id); err != nil { // settled just now
			return policy.Call{}, err
		}
	}
	r.reported = sql.NullInt64{Int64: count, Valid: true}
	r.reportedCost = sql.NullInt64{Int64: cost, Valid: true}
	var add, addCost int64
	wasOpen := !r.finishedAt.Valid
	if r.finishedAt.Valid {
		// Expired before its caller finished it: the reservation is
		// counted; only tokens or cost above it add, now.
		add, addCost = max(count-r.reserved, 0), max(cost-r.reservedCost, 0)
		r.tokens.Int64 = max(r.reserved, count)
		r.cost.Int64 = max(r.reservedCost, cost)
	} else {
		add, addCost = count, cost
		r.finishedAt = sql.NullInt64{Int64: l.countAt(now), Valid: true}
		r.tokens = sql.NullInt64{Int64: count, Valid: true}
		r.cost = sql.NullInt64{Int64: cost, Valid: true}
		l.open--
		l.reserved[policy.MeasureTokens] -= r.reserved
		l.reserved[policy.MeasureCost] -= r.reservedCost
		l.unlistOpen(expiredCall{id: id, reserved: r.reserved, reservedCost: r.reservedCost, expiresAt: r.expiresAt})
	}
	if row, ok := l.add(now, add, addCost); ok {
		if err := tx.insertRow(r.user, row); err != nil {
			return policy.Call{}, err
		}
	}
	if _, err := tx.exec(qCallFinish, r.finishedAt.Int64, r.tokens.Int64, count, r.cost.Int64, cost, id); err != nil {
		return policy.Call{}, unavailable(err)
	}
	if wasOpen && r.expiresAt == l.nextExpiry {
		// The next to expire is finished now: find the one after it.
		if err := tx.nextExpiry(l, r.user); err != nil {
			return policy.Call{}, err
		}
	}
	return r.call(id), nil
}

// KeepAlive implements policy.RequestStore.
func (s *Store) KeepAlive(ctx context.Context, id string, now, expiresAt time.Time) (policy.Call, error) {
	if pw, ok := s.writer.(*pgWriter); ok {
		refused := func(callRow) error { return policy.Errorf(policy.ECONFLICT, "call %q is finished", id) }
		return pw.callStatement(ctx, id, refused, `SELECT * FROM keepalive_call($1, $2, $3)`, id, now.UnixMicro(), expiresAt.UnixMicro())
	}
	var c policy.Call
	err := s.writer.do(ctx, func(tx *writeTx) error {
		r, err := tx.callerCall(id)
		if err != nil {
			return err
		}
		if r.finishedAt.Valid || r.expiresAt <= now.UnixMicro() {
			return policy.Errorf(policy.ECONFLICT, "call %q is finished", id)
		}
		r.expiresAt = expiresAt.UnixMicro()
		if _, err := tx.exec(qCallKeepAlive, r.expiresAt, id); err != nil {
			return unavailable(err)
		}
		if st := tx.cachedUser(r.user); st != nil {
			tx.touch(r.user)
			st.calls = nil // its next expiry may have moved
		}
		c = r.call(id)
		if r.account.Valid {
			// The same call in its account's pool, if not forgotten.
			pool := policy.AccountKey(r.account.String)
			if _, err := tx.exec(qCallKeepAlive, r.expiresAt, policy.PoolCallID(id)); err != nil {
				return unavailable(err)
			}
			if st := tx.cachedUser(pool); st != nil {
				tx.touch(pool)
				st.calls = nil
			}
		}
		return nil
	})
	return c, err
}

// pruneSettleStep visits the users after cursor, in key order, that have
// an open call expired at or before cutoff, and settles those calls, so
// that pruneCallsStep finds them finished and their tokens are counted
// before the rows of finished tokens are pruned; it stops after about
// pruneBatch users. Only open calls are walked (calls_open), never a day of
// finished ones.
func pruneSettleStep(tx *writeTx, cursor string, cutoff int64) (deleted int64, next string, done bool, err error) {
	for visited := 0; visited < pruneBatch; visited++ {
		var user string
		err := tx.queryRow(qCallNextExpired, cursor, cutoff).Scan(&user)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, cursor, true, nil
		}
		if err != nil {
			return 0, "", false, unavailable(err)
		}
		// Settling writes the user's running totals of tokens, as an
		// admission may at the same time on another replica. Batches of
		// admissions take several users' locks in the order of their
		// numbers (see pgBatch), and this walk goes in the order of ids:
		// so a step waits only for its first user's lock, holding none,
		// and only tries the others. A user whose lock is held ends the
		// step, and the next begins with them.
		if visited == 0 {
			if err := tx.lockUser(user); err != nil {
				return 0, "", false, err
			}
		} else if ok, err := tx.tryLockUser(user); err != nil || !ok {
			return 0, cursor, false, err
		}
		st, err := tx.userOf(user)
		if err != nil {
			return 0, "", false, err
		}
		if _, err := tx.settle(st, user, cutoff); err != nil {
			return 0, "", false, err
		}
		cursor = user
	}
	return 0, cursor, false, nil
}

// pruneCallsStep deletes up to pruneBatch calls finished at or before
// cutoff, oldest first, whoever they belong to: a range of
// calls_finished_tier. cutoff being at least a day ago, no window counts
// them any more, and no admission reads or writes them, so deleting them
// takes no user's lock. Calls expired by cutoff are finished by
// pruneSettleStep first.
func pruneCallsStep(tx *writeTx, _ string, cutoff int64) (deleted int64, next string, done bool, err error) {
	res, err := tx.exec(qCallsPrune, cutoff, pruneBatch)
	if err != nil {
		return 0, "", false, unavailable(err)
	}
	n, _ := res.RowsAffected()
	return n, "", n < pruneBatch, nil
}

// pruneTokensStep visits users after cursor in key order, like pruneStep,
// deleting their rows of finished tokens counted at or before cutoff, after
// pruneSettleStep settled what expired by then.
// Deleting a user's oldest rows keeps the differences of running totals,
// which is all that counting reads.
// Rows are rolled up into their billing periods first, as pruneStep's.
func pruneTokensStep(tx *writeTx, cursor string, cutoff int64, def policy.BillingCycle) (deleted int64, next string, done bool, err error) {
	for visited := 0; visited < pruneBatch && deleted < pruneBatch; visited++ {
		var user string
		err := tx.queryRow(qTokNextUser, cursor).Scan(&user)
		if errors.Is(err, sql.ErrNoRows) {
			return deleted, cursor, true, nil
		}
		if err != nil {
			return 0, "", false, unavailable(err)
		}
		if ok, err := lockForPrune(tx, user, visited); err != nil || !ok {
			return deleted, cursor, false, err
		}
		bound, partial := cutoff, false
		var nth int64
		err = tx.queryRowSQL(`SELECT ts FROM call_tokens WHERE user_id = ? AND ts <= ? ORDER BY ts, total, cost_total LIMIT 1 OFFSET ?`,
			user, cutoff, pruneBatch-deleted-1).Scan(&nth)
		switch {
		case err == nil:
			bound, partial = nth, true
		case !errors.Is(err, sql.ErrNoRows):
			return 0, "", false, unavailable(err)
		}
		if err := tx.rollUp(tokensRollup, user, bound, def); err != nil {
			return 0, "", false, err
		}
		res, err := tx.exec(qTokPrune, user, bound)
		if err != nil {
			return 0, "", false, unavailable(err)
		}
		n, _ := res.RowsAffected()
		deleted += n
		if n > 0 {
			tx.forgetUser(user) // its cached newest row may be among those deleted
		}
		if partial {
			return deleted, cursor, false, nil
		}
		cursor = user
	}
	return deleted, cursor, false, nil
}
