// Package migrations holds the database schema as goose SQL migrations, a
// folder per dialect, embedded so that the binary can bring any database up
// to date. Both folders end at the same version: a version names one schema
// whichever store holds it.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// SQLite holds the migrations of a SQLite file, named NNNNN_description.sql.
var SQLite = sub("sqlite")

// Postgres holds the migrations of a PostgreSQL database. PostgreSQL
// support began at version 8, so its first file creates that schema whole.
var Postgres = sub("postgres")

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // dir is a constant above, embedded with the binary
	}
	return f
}
