// Command baseline is the load benchmark's yardstick (api/testdata/load
// builds and starts it): an Echo v4 server that answers
// POST /v1/check for the same body as the service, and nothing else. It
// prints "baseline listening on http://ADDR" once it listens on a loopback
// port, and stops on SIGTERM or an interrupt.
//
// Without flags it is the do-nothing handler: it binds the check body and
// answers a small JSON object.
//
// With -bare FILE it is the bare durable handler, on the SQLite database
// FILE: the do-nothing handler, except that it queues one row per check to
// a single writer goroutine and answers after the COMMIT that holds it. The
// writer takes whatever is queued (up to 256 rows, as the service's
// writer), inserts each row with one prepared INSERT into a table of the
// same shape as the service's requests table, and commits, with WAL and
// synchronous=FULL as the service's default. It is what a durable check
// costs with nothing else: no windows, no tiers, no headers, metrics or
// logs.
//
// It lives under testdata so that go build ./... and go vet ./... leave it
// out: it is a program of the tests, not of the service.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	_ "modernc.org/sqlite"
)

func main() {
	bare := flag.String("bare", "", "be the bare durable handler on this SQLite `file`")
	flag.Parse()
	e := echo.New()
	if *bare == "" {
		e.POST("/v1/check", func(c echo.Context) error {
			var body checkBody
			if err := bind(c, &body); err != nil {
				return err
			}
			return c.JSON(http.StatusOK, answer{Allowed: true, Tier: body.Context.UserTier})
		})
	} else {
		record, err := openWriter(context.Background(), *bare)
		if err != nil {
			log.Fatal(err)
		}
		e.POST("/v1/check", func(c echo.Context) error {
			var body checkBody
			if err := bind(c, &body); err != nil {
				return err
			}
			if err := record(body.Context.UserID); err != nil {
				return err
			}
			return c.JSON(http.StatusOK, answer{Allowed: true, Tier: body.Context.UserTier})
		})
	}
	if err := serve(e); err != nil {
		log.Fatal(err)
	}
}

// checkBody is the check body as both baselines bind it: the same shape as
// the service reads.
type checkBody struct {
	InputText string `json:"input_text"`
	Context   struct {
		UserID   string `json:"user_id"`
		UserTier string `json:"user_tier"`
		Feature  string `json:"feature"`
	} `json:"context"`
}

type answer struct {
	Allowed bool   `json:"allowed"`
	Tier    string `json:"tier"`
}

// bind decodes the check body of c into body.
func bind(c echo.Context, body *checkBody) error {
	if err := json.NewDecoder(c.Request().Body).Decode(body); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error())
	}
	return nil
}

// serve serves e on a loopback port, prints its URL, and returns on SIGTERM
// or an interrupt.
func serve(e *echo.Echo) error {
	e.HideBanner, e.HidePort = true, true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("baseline listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return srv.Close()
}

// openWriter opens the database at path with WAL and synchronous=FULL and
// starts its single writer; record queues a row of user and returns once
// the COMMIT that holds it is done.
func openWriter(ctx context.Context, path string) (record func(user string) error, err error) {
	sdb, err := sql.Open("sqlite", path+"?_busy_timeout=5000&_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		return nil, err
	}
	conn, err := sdb.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var journal string
	var synchronous int
	if err := errors.Join(
		conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journal),
		conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&synchronous),
	); err != nil {
		return nil, err
	}
	if journal != "wal" || synchronous != 2 {
		return nil, fmt.Errorf("journal_mode %s, synchronous %d; want wal and 2 (FULL)", journal, synchronous)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS requests (
		user_id TEXT    NOT NULL,
		ts      INTEGER NOT NULL,
		seq     INTEGER NOT NULL,
		PRIMARY KEY (user_id, ts)
	) WITHOUT ROWID`); err != nil {
		return nil, err
	}
	var stmts [3]*sql.Stmt
	for i, q := range []string{"BEGIN IMMEDIATE", "INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, ?)", "COMMIT"} {
		if stmts[i], err = conn.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
	}
	begin, insert, commit := stmts[0], stmts[1], stmts[2]

	type row struct {
		user string
		done chan error
	}
	rows := sync.Pool{New: func() any { return &row{done: make(chan error, 1)} }}
	queue := make(chan *row, 1024)
	go func() {
		var ts, seq int64 // ts strictly increases, so (user_id, ts) is unique
		batch := make([]*row, 0, 256)
		for r := range queue {
			batch = append(batch[:0], r)
		fill:
			for len(batch) < cap(batch) {
				select {
				case r := <-queue:
					batch = append(batch, r)
				default:
					break fill
				}
			}
			_, err := begin.ExecContext(ctx)
			for _, r := range batch {
				if err != nil {
					break
				}
				ts, seq = max(ts+1, time.Now().UnixMicro()), seq+1
				_, err = insert.ExecContext(ctx, r.user, ts, seq)
			}
			if err == nil {
				_, err = commit.ExecContext(ctx)
			}
			if err != nil {
				conn.ExecContext(ctx, "ROLLBACK")
			}
			for _, r := range batch {
				r.done <- err
			}
		}
	}()
	return func(user string) error {
		r := rows.Get().(*row)
		r.user = user
		queue <- r
		if err := <-r.done; err != nil {
			return err
		}
		rows.Put(r)
		return nil
	}, nil
}
