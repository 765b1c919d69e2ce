// Package migrations holds the database schema as goose SQL migrations,
// embedded so that the binary can bring any database file up to date.
package migrations

import "embed"

// FS holds every migration, named NNNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
