// Command policyguard serves policy-based guardrails for AI agents: per-user
// rate limits over rolling minute, hour and day windows and the features of
// each subscription tier, checked before a request reaches the model.
//
// main.go is wiring only: run builds the store of package db, the
// policy.Service, the JSON API of package api with the admin page of
// package web mounted on it, and the cleanup, and shuts them down; the
// settings table below is the one place a flag or environment variable is
// named. The subcommands ("policyguard tiers", "prices", "backup") and the
// log writer live in package api/cli. Only this package imports all others.
//
// # Layout
//
//   - main.go: the command's wiring: the table of settings (flag, environment
//     variable, default, meaning; -h and the README's Configuration table come
//     from it), the store, the policy.Service, the API with the admin page
//     mounted on its Echo instance, one policy.AdminGate for both, the
//     cleanup, graceful shutdown
//   - api/cli/: what the command runs beyond wiring: the tiers, prices and
//     backup subcommands, the reading of the settings table, the batching log
//     writer
//   - policy/: the domain, importing nothing of ours: tiers and the table of
//     limit fields, user records, rolling windows, metered calls, shadow
//     limits and previews, money and the price table, the guardrail chain and
//     the Service, the storage interfaces; and what the API and the page must
//     decide and say alike: the admin-token gate and its throttle, the wording
//     of changes, HTTPStatus, ParseLimit, and TestClock, the one test clock of
//     every package
//   - db/: the store on SQLite or PostgreSQL, one code for both (go doc ./db
//     tells how it counts and commits); db/dbtest gives each test a fresh
//     database
//   - migrations/: goose SQL migrations, embedded: sqlite/ and postgres/, both
//     ending at the same schema version
//   - api/: the HTTP API on Echo v4: routes (server.go), the error table, the
//     wire shapes of tiers and records, the tiers and prices file formats, the
//     hand-written check answer (decision.go), metrics, the OpenAPI
//     description, the Guard middleware for your app; api/gateway/, the
//     gateway it mounts: routes, keys and metering (gateway.go), the relay
//     (relay.go), a file per protocol (openai.go, anthropic.go)
//   - api/client/: a typed Go client of the HTTP API, on net/http alone
//   - api/guardtest/: a real service in a Go test, on a clock the test moves
//   - api/testdata/load/: the load benchmark (the README's Performance), run by its path
//     only
//   - web/: the admin page: handlers, sessions, forms, SVG charts, embedded
//     templates and assets; imports policy only
//
// The rule, checked by TestDependencyRule: policy imports nothing of ours; db
// imports policy (and migrations); api and api/gateway import policy, api
// mounts api/gateway; web only policy; only main imports them all. A new limit
// field touches 3 files and its tests: its row in policy/limits.go, a field of
// api/client/limits.go and a property of api/openapi.yaml; the database keeps
// each set of limits as one JSON object, so it needs no migration.
package main
