package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// TestAdmitAnswersAfterCommit checks that Admit returns only once its row
// is committed: another connection to the file, opened by the test and not
// by the store, sees every admission the moment Admit has returned. A store
// that answered first and committed after would lose those admissions to a
// crash in between.
func TestAdmitAnswersAfterCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "durable.db")
	s, err := db.Open(context.Background(), path, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)

	const writers, each = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("durable-%d", w)
			for i := range each {
				at := t0.Add(time.Duration(i) * time.Millisecond)
				err := s.Admit(context.Background(), user, func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil })
				if err != nil {
					errs <- err
					return
				}
				var n int
				if err := other.QueryRow(`SELECT count(*) FROM requests WHERE user_id = ?`, user).Scan(&n); err != nil {
					errs <- err
					return
				}
				if n != i+1 {
					errs <- fmt.Errorf("%s: Admit returned for request %d, but another connection sees %d rows", user, i+1, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
