package db

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.AuditStore = (*Store)(nil)

// The audit log (audit_log) holds every change of every kind. Each store
// write that changes something inserts its entry in the transaction of the
// change, so that neither commits without the other; the actor is the one
// the caller's context carries (policy.Actor), read before the write job
// is queued, since the writer runs jobs on a context of its own.

// auditEntry is the part of an entry a write supplies; insertAudit adds
// the time, the actor and the source.
type auditEntry struct {
	kind, subject, action string
	old, new              any // JSON text, or nil for none
}

// auditOf holds what a write's entries share: when, by whom, through what.
type auditOf struct {
	at            time.Time
	actor, source string
}

// auditBy returns the actor and source ctx carries, at at.
func auditBy(ctx context.Context, at time.Time) auditOf {
	return auditOf{at: at, actor: policy.Actor(ctx), source: policy.ChangeSource(ctx)}
}

// insertAudit records e in tx.
func (a auditOf) insert(tx *writeTx, e auditEntry) error {
	_, err := tx.execSQL(`INSERT INTO audit_log (at, actor, kind, subject, action, source, old, new) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		a.at.UnixMicro(), a.actor, e.kind, e.subject, e.action, a.source, e.old, e.new)
	return unavailable(err)
}

// action returns what a change from old to new did: created, deleted or
// updated.
func action(old, new any) string {
	switch {
	case old == nil:
		return policy.AuditCreated
	case new == nil:
		return policy.AuditDeleted
	}
	return policy.AuditUpdated
}

// auditObject returns v as JSON text for the log.
func auditObject(v any) any {
	b, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return nil // the values logged are plain structs: cannot happen
	}
	return string(b)
}

// AuditLog implements policy.AuditStore on the read pool.
func (s *Store) AuditLog(ctx context.Context, q policy.AuditQuery) ([]policy.AuditEntry, error) {
	var where []string
	var args []any
	if q.Actor != "" {
		where, args = append(where, "actor = ?"), append(args, q.Actor)
	}
	if q.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, q.Kind)
	}
	if !q.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, q.Since.UnixMicro())
	}
	if !q.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, q.Until.UnixMicro())
	}
	if q.Before > 0 {
		where, args = append(where, "id < ?"), append(args, q.Before)
	}
	text := `SELECT id, at, actor, kind, subject, action, source, old, new FROM audit_log`
	if len(where) > 0 {
		text += ` WHERE ` + strings.Join(where, " AND ")
	}
	text += ` ORDER BY id DESC`
	if q.Limit > 0 {
		text, args = text+` LIMIT ?`, append(args, q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.d.bind(text), args...)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := []policy.AuditEntry{}
	for rows.Next() {
		var (
			e        policy.AuditEntry
			at       int64
			old, new sql.NullString
		)
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Kind, &e.Subject, &e.Action, &e.Source, &old, &new); err != nil {
			return nil, unavailable(err)
		}
		e.At, e.Old, e.New = time.UnixMicro(at).UTC(), old.String, new.String
		out = append(out, e)
	}
	return out, unavailable(rows.Err())
}
