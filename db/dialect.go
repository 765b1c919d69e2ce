package db

import (
	"io/fs"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/policyguard/policyguard/migrations"
)

// dialect is what differs between the two databases a Store keeps its data
// in. The statements are written once, in SQLite's syntax with ? or ?N
// parameters, in the subset both databases run alike; bind rewrites them
// for PostgreSQL. The few that cannot be shared are fields here.
type dialect struct {
	name       string
	postgres   bool
	goose      goose.Dialect
	migrations fs.FS
	// queries are the statements of the hot path and of pruning (see
	// requests.go), bound.
	queries [numQueries]string
	// replay reads a preview's requests (see replayFrom).
	replay string
}

var (
	sqliteDialect = &dialect{name: "SQLite", goose: goose.DialectSQLite3, migrations: migrations.SQLite,
		replay: `SELECT user_id, group_concat(ts, ',') ` + replayFrom}
	postgresDialect = &dialect{name: "PostgreSQL", postgres: true, goose: goose.DialectPostgres, migrations: migrations.Postgres,
		replay: bindDollar(`SELECT user_id, string_agg(ts::text, ',' ORDER BY ts) ` + replayFrom)}
)

func init() {
	for q, text := range callQueries {
		queries[q] = text
	}
	for q, text := range runQueries {
		queries[q] = text
	}
	pg := queries
	for q, text := range pgPoolQueries() {
		pg[q] = text
	}
	for q, text := range poolQueries {
		queries[q] = text
	}
	sqliteDialect.queries = queries
	for q, text := range pg {
		postgresDialect.queries[q] = bindDollar(text)
	}
}

// bind returns text with its parameters in the dialect's syntax.
func (d *dialect) bind(text string) string {
	if !d.postgres {
		return text
	}
	return bindDollar(text)
}

// bindDollar rewrites SQLite's parameters for PostgreSQL: ?N becomes $N,
// and each bare ? the next number, counting bare ones only. No statement
// of this package mixes the two forms or has a ? in a literal.
func bindDollar(text string) string {
	if !strings.Contains(text, "?") {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + 8)
	n := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '?' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('$')
		if i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9' {
			continue // ?N: the digits follow as they are
		}
		n++
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// Kind names the database the store keeps its data in: "SQLite" or
// "PostgreSQL".
func (s *Store) Kind() string { return s.d.name }
