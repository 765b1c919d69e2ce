package db

import (
	"context"
	"fmt"
	"sync"

	"github.com/policyguard/policyguard/policy"
)

// finishJob is one finish waiting for a batch (see pgWriter.finish).
type finishJob struct {
	ctx    context.Context
	id     string
	tokens *int64
	now    int64
	errc   chan error
	st     callState // the batch's answer, when errc says nil
}

var finishJobPool = sync.Pool{New: func() any { return &finishJob{errc: make(chan error, 1)} }}

// finish finishes the call named id on PostgreSQL, in a batch with the
// other finishes waiting at the same moment: one statement, finish_calls,
// finishes them all in one commit, as admissions share admit_batch's. A
// lone finish is a batch of one. When a batch fails, each of its finishes
// runs alone, in finish_call, so that one call's failure (a pool copy's
// conflict, a lock held too long) is its own.
func (w *pgWriter) finish(ctx context.Context, id string, tokens *int64, now int64, refused func(callRow) error) (policy.Call, error) {
	if err := w.enter(); err != nil {
		return policy.Call{}, err
	}
	defer w.running.Done()
	j := finishJobPool.Get().(*finishJob)
	j.ctx, j.id, j.tokens, j.now = ctx, id, tokens, now
	err := w.submitFinish(j)
	st := j.st
	*j = finishJob{errc: j.errc}
	finishJobPool.Put(j)
	if err == errRedo {
		return w.callStatementTx(ctx, id, refused, `SELECT * FROM finish_call($1, $2, $3)`, id, tokens, now)
	}
	if err != nil {
		return policy.Call{}, err
	}
	return st.answer(id, refused)
}

// submitFinish queues j and waits for its answer: as submit does for an
// admission, a caller that goes away before a batch takes its finish has
// nothing done, and once taken waits for the outcome.
func (w *pgWriter) submitFinish(j *finishJob) error {
	select {
	case w.finishes <- j:
	case <-j.ctx.Done():
		return j.ctx.Err()
	}
	return <-j.errc
}

// finishLoop runs the finishes waiting in batches of up to maxBatch until
// the queue is closed. Unlike a batch of admissions, which holds its
// transaction open to commit with the next batch's statement, a batch of
// finishes is one statement and its own commit: nothing in Go has to
// agree with it before it commits.
func (w *pgWriter) finishLoop() {
	defer w.finishers.Done()
	var b finishBatch
	for {
		j, ok := <-w.finishes
		if !ok {
			return
		}
		b.jobs = append(b.jobs[:0], j)
	more:
		for len(b.jobs) < w.maxBatch {
			select {
			case j, ok := <-w.finishes:
				if !ok {
					break more
				}
				b.jobs = append(b.jobs, j)
			default:
				break more
			}
		}
		b.run(w)
		clear(b.jobs)
	}
}

// finishBatch is a finish loop's batch, with finish_calls' arguments;
// buffers reused from one batch to the next.
type finishBatch struct {
	jobs   []*finishJob
	ids    []string
	tokens []*int64
	now    []int64
}

// run runs b's finishes in finish_calls and answers each: nil with its
// state, or errRedo, for its caller to run it alone, when the batch
// failed.
func (b *finishBatch) run(w *pgWriter) {
	live := b.jobs[:0]
	for _, j := range b.jobs {
		// A caller that gave up before its finish started has nothing
		// done.
		if err := j.ctx.Err(); err != nil {
			j.errc <- err
			continue
		}
		live = append(live, j)
	}
	b.jobs = live
	if len(b.jobs) == 0 {
		return
	}
	b.ids, b.tokens, b.now = b.ids[:0], b.tokens[:0], b.now[:0]
	for _, j := range b.jobs {
		b.ids, b.tokens, b.now = append(b.ids, j.id), append(b.tokens, j.tokens), append(b.now, j.now)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.batchTimeout)
	defer cancel()
	err := b.query(ctx, w)
	if err == nil {
		w.finishBatches.Add(1)
		w.finishBatched.Add(int64(len(b.jobs)))
	} else {
		w.finishAlone.Add(int64(len(b.jobs)))
	}
	for _, j := range b.jobs {
		if err != nil {
			j.errc <- errRedo
			continue
		}
		j.errc <- nil
	}
}

// query runs finish_calls and reads its answers into the jobs.
func (b *finishBatch) query(ctx context.Context, w *pgWriter) error {
	rows, err := w.db.QueryContext(ctx, `SELECT * FROM finish_calls($1, $2, $3)`, b.ids, b.tokens, b.now)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if n == len(b.jobs) {
			return fmt.Errorf("finish_calls answered more than %d finishes", len(b.jobs))
		}
		if err := b.jobs[n].st.scan(rows); err != nil {
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(b.jobs) {
		return fmt.Errorf("finish_calls answered %d finishes of %d", n, len(b.jobs))
	}
	return nil
}
