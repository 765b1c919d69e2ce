// Package policy is the domain of the guardrail service, and imports no
// other package of this module: every other one imports it.
//
// It holds tiers (tier.go) and user records with their overrides
// (users.go), the check request and its Decision, the guardrail chain
// (guardrail.go), the rolling-window evaluation (window.go), metered calls
// (calls.go), shadow limits (shadow.go) and the replay behind previews
// (replay.go), the keys that authenticate the model gateway's clients
// (keys.go), money and the versions of the price table (money.go,
// prices.go), billing periods in a subscriber's time zone (period.go),
// and the Service that puts them together (service*.go). It
// declares the storage interfaces the Service needs; package db implements
// them.
//
// It also holds what the two HTTP faces of the service, the JSON API
// (package api) and the admin page (package web), must say and decide
// alike, so that neither imports the other: the admin token's gate and its
// throttle (AdminGate, Secret), named admins and their roles (Admin,
// Role), the one table of who may use each route (Routes, RouteAccess),
// the audit log and the actor of a change (AuditEntry, WithActor), the
// session records of the admin page (SessionStore), the wording of tiers, records, accounts and their
// changes (TierSummary, TierDiff, UserSummary, AccountSummary,
// PoolSummary), the reading of a limit typed as text (ParseLimit,
// LimitField.Parse) and its wording (LimitField.Text and Format: a spend
// limit in dollars), and the HTTP status of each error code (HTTPStatus).
// TestClock, the clock that moves only when told, serves every package's
// tests and the service's -test-clock.
//
// Time is a parameter: the Service reads it from the clock WithClock
// gives, and no function here sleeps.
package policy
