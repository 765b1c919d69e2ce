package policy

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
)

// LimitKind is what a limit counts.
type LimitKind int

const (
	// KindRequests limits the admitted requests of a window.
	KindRequests LimitKind = iota
	// KindBurst widens the minute window's request limit.
	KindBurst
	// KindTokens limits the tokens of the calls of a window.
	KindTokens
	// KindConcurrency limits the calls open at once.
	KindConcurrency
	// KindCost limits the money the calls of a window cost: its values
	// are Money, picodollars, shown in dollars on every surface.
	KindCost
	// KindDuration limits a run's time, in whole seconds from its first
	// request.
	KindDuration
	// KindDepth limits the levels of a tree of runs, the root counting as
	// one.
	KindDepth
	numKinds // the number of kinds, not one
)

// Scope is the sets of limits a limit may be set in, a bit each: a row of
// LimitFields says where it belongs, and every surface that lists a set of
// limits lists the rows of that set's scope only.
type Scope uint8

const (
	// ScopeTier is a tier's own limits (Tier.Limits), a user's overrides
	// of them and, for the request limits, its shadow limits.
	ScopeTier Scope = 1 << iota
	// ScopeAccount is the pooled limits of the accounts on a plan
	// (Tier.Account) and an account's overrides of them.
	ScopeAccount
	// ScopeRun is the limits of each run of an agent (Tier.Run).
	ScopeRun
)

// LimitField is one limit a tier sets, described once for every surface
// that shows, reads, checks or compares it: the JSON API and the tiers file
// (by Name), the admin page's forms (Label, Doc), the wording of a change,
// validation, a user's overrides and a tier's shadow limits. Its methods
// read and set the limit on the domain types.
type LimitField struct {
	// Name is the field's name in the API, the tiers file, the database
	// and forms: "requests_per_minute".
	Name string
	// Label names the field for people: "Requests per minute".
	Label string
	// Doc says in one sentence what the limit does when its Label does
	// not; "" when it does.
	Doc  string
	Kind LimitKind
	// Window is the window the limit applies to, when Windowed.
	Window   Window
	Windowed bool
	// Optional reports whether the limit may be unset (null on the wire):
	// an unset optional limit limits nothing, and a user's record may
	// remove it. A required limit is always set; 0 admits nothing.
	Optional bool
	// Max is the largest value the limit may take; 0 reads as MaxLimit.
	// Every value of the limit, wherever it is set, is checked against
	// it here and nowhere else: the database stores what policy accepts.
	Max int64
	// Min is the smallest value the limit may take: 0 but for a run's
	// max_depth, whose root alone is one level.
	Min int64
	// Scopes are the sets of limits the limit belongs to; 0 reads as
	// ScopeTier|ScopeAccount. A set never holds a limit outside its scope:
	// its parsing reads the name as unknown, and validation refuses it.
	Scopes Scope

	// id is the limit's row in LimitFields and its index in a LimitSet.
	id LimitID
}

// LimitID names a limit: its row in LimitFields, and the index of its
// value in a LimitSet or an Overrides.
type LimitID int

// The limits, in the order of LimitFields.
const (
	RequestsPerMinute LimitID = iota
	RequestsPerHour
	RequestsPerDay
	BurstAllowance
	TokensPerMinute
	TokensPerHour
	TokensPerDay
	MaxConcurrent
	CostPerMinute
	CostPerHour
	CostPerDay
	MaxRunRequests
	MaxRunTokens
	MaxRunCost
	MaxRunDuration
	MaxRunDepth
	numLimits // the number of limits, not one
)

// DefaultRunMaxDepth is the levels a tree of runs may have when its tier's
// run object sets no max_depth: the root and three levels of sub-agents.
const DefaultRunMaxDepth = 4

// MaxRunDepthLimit is the largest max_depth a run object may set.
const MaxRunDepthLimit = 64

// LimitFields lists every limit of a tier, in the order the API, the tiers
// file and the admin page show them; within a kind, the windows run from
// the shortest to the longest. Each row says which sets of limits hold it
// (Scopes): a tier's own limits and an account's pooled ones hold the rows
// up to cost_per_day, a run object (Tier.Run) max_concurrent and the rows
// after cost_per_day. Every surface that lists a set of limits walks this
// table, the rows of the set's scope only (FieldsIn): the domain's
// LimitSet and Overrides, validation (each value from its row's Min to its
// Max), the wording of a change, the API's and the tiers
// file's JSON, the admin page's forms and tables, and the database, which
// keeps each set of limits as one JSON object keyed by Name. How a value
// is written and read on the wire is decided in one place per surface, by
// its row (api's writeLimits and readLimit, the forms' parsing): a kind
// whose values are not integers on the wire changes those.
//
// Adding a limit of a kind that exists touches, counted by adding one: this
// file (its LimitID and its row), api/openapi.yaml (a property of the
// Limits schema, or of RunLimits for a run's) and api/client/limits.go (a
// field of client.Limits, or of client.RunLimits), and
// its tests: one of its own, and the golden files that print every limit
// of a tier (api/tierfile_test.go, api/shadow_account_test.go). No
// migration: the database keeps each set as one JSON object by Name. A new
// required limit reads 0 on the rows stored before it, which admits
// nothing: make it optional, or give it a migration that sets it.
var LimitFields = [numLimits]LimitField{
	RequestsPerMinute: {Name: "requests_per_minute", Label: "Requests per minute", Kind: KindRequests, Window: Minute, Windowed: true},
	RequestsPerHour:   {Name: "requests_per_hour", Label: "Requests per hour", Kind: KindRequests, Window: Hour, Windowed: true},
	RequestsPerDay:    {Name: "requests_per_day", Label: "Requests per day", Kind: KindRequests, Window: Day, Windowed: true},
	BurstAllowance: {Name: "burst_allowance", Label: "Burst allowance", Doc: "Extra requests the minute window admits.",
		Kind: KindBurst, Window: Minute, Windowed: true},
	TokensPerMinute: {Name: "tokens_per_minute", Label: "Tokens per minute", Kind: KindTokens, Window: Minute, Windowed: true, Optional: true},
	TokensPerHour:   {Name: "tokens_per_hour", Label: "Tokens per hour", Kind: KindTokens, Window: Hour, Windowed: true, Optional: true},
	TokensPerDay:    {Name: "tokens_per_day", Label: "Tokens per day", Kind: KindTokens, Window: Day, Windowed: true, Optional: true},
	MaxConcurrent: {Name: "max_concurrent", Label: "Max concurrent calls", Doc: "Calls open at once.", Kind: KindConcurrency, Optional: true,
		Scopes: ScopeTier | ScopeAccount | ScopeRun},
	CostPerMinute: {Name: "cost_per_minute", Label: "Spend per minute", Kind: KindCost, Window: Minute, Windowed: true, Optional: true, Max: math.MaxInt64},
	CostPerHour:   {Name: "cost_per_hour", Label: "Spend per hour", Kind: KindCost, Window: Hour, Windowed: true, Optional: true, Max: math.MaxInt64},
	CostPerDay:    {Name: "cost_per_day", Label: "Spend per day", Doc: "Model spend in US dollars, priced by the price table.", Kind: KindCost, Window: Day, Windowed: true, Optional: true, Max: math.MaxInt64},
	// A run's limits count from its first request: none is Windowed.
	MaxRunRequests: {Name: "max_requests", Label: "Max steps", Doc: "Requests the run and its sub-agents may make.",
		Kind: KindRequests, Optional: true, Scopes: ScopeRun},
	MaxRunTokens: {Name: "max_tokens", Label: "Max tokens", Kind: KindTokens, Optional: true, Scopes: ScopeRun},
	MaxRunCost: {Name: "max_cost", Label: "Max spend", Doc: "Model spend in US dollars over the whole run.",
		Kind: KindCost, Optional: true, Max: math.MaxInt64, Scopes: ScopeRun},
	MaxRunDuration: {Name: "max_duration", Label: "Max duration", Doc: "Seconds from the run's first request.",
		Kind: KindDuration, Optional: true, Scopes: ScopeRun},
	MaxRunDepth: {Name: "max_depth", Label: "Max depth", Doc: "Levels of sub-agents, the run itself counting as one (4 when unset).",
		Kind: KindDepth, Optional: true, Min: 1, Max: MaxRunDepthLimit, Scopes: ScopeRun},
}

func init() {
	for i := range LimitFields {
		f := &LimitFields[i]
		f.id = LimitID(i)
		if f.Max == 0 {
			f.Max = MaxLimit
		}
		if f.Scopes == 0 {
			f.Scopes = ScopeTier | ScopeAccount
		}
	}
}

// In reports whether f belongs to a set of limits of scope s.
func (f *LimitField) In(s Scope) bool {
	sc := f.Scopes
	if sc == 0 { // as init sets it, for the package's variables set before
		sc = ScopeTier | ScopeAccount
	}
	return sc&s != 0
}

// FieldsIn returns the rows of LimitFields in scope s, in order: the
// limits a set of that scope holds.
func FieldsIn(s Scope) iter.Seq[*LimitField] {
	return func(yield func(*LimitField) bool) {
		for i := range LimitFields {
			if f := &LimitFields[i]; f.In(s) && !yield(f) {
				return
			}
		}
	}
}

// Field returns id's row of LimitFields.
func (id LimitID) Field() *LimitField { return &LimitFields[id] }

// ID returns f's row in LimitFields.
func (f *LimitField) ID() LimitID { return f.id }

// index returns f's row in LimitFields.
func (f *LimitField) index() int { return int(f.id) }

// LimitSet is a set of limits, one per row of LimitFields, in its order:
// nil sets no limit. A tier's own limits, the pooled limits of the
// accounts on its plan (Tier.Account), its run object (Tier.Run) and its
// shadow limits are each one, holding only the rows of its Scope.
// In a tier's own limits a required limit is never unset: nil reads as 0
// there (see LimitField.Value). The zero value sets no limit.
//
// A LimitSet shares the values it points to with its copies: replace a
// value, never write through it.
type LimitSet [numLimits]*int64

// Get returns the limit of f; nil when s sets none.
func (s *LimitSet) Get(f *LimitField) *int64 { return s[f.id] }

// Set sets the limit of f to a copy of v (nil: none).
func (s *LimitSet) Set(f *LimitField, v *int64) {
	if v != nil {
		c := *v
		v = &c
	}
	s[f.id] = v
}

// Value returns the limit id, 0 when s sets none.
func (s LimitSet) Value(id LimitID) int64 {
	if p := s[id]; p != nil {
		return *p
	}
	return 0
}

// String returns s as "{requests_per_minute:5 ... cost_per_day:$20.00}",
// the values rather than where they are kept.
func (s LimitSet) String() string {
	b := []byte{'{'}
	for i, p := range s {
		if p == nil && !LimitFields[i].In(ScopeTier|ScopeAccount) {
			continue // a run's limit, unset: most sets are no run's
		}
		if len(b) > 1 {
			b = append(b, ' ')
		}
		b = append(b, LimitFields[i].Name...)
		b = append(b, ':')
		if p == nil {
			b = append(b, "none"...)
		} else {
			b = append(b, LimitFields[i].Format(*p)...)
		}
	}
	return string(append(b, '}'))
}

// IsZero reports whether s limits nothing.
func (s *LimitSet) IsZero() bool { return *s == LimitSet{} }

// Equal reports whether s and q set the same limits to the same values.
func (s *LimitSet) Equal(q *LimitSet) bool {
	for i := range s {
		if !sameValue(s[i], q[i]) {
			return false
		}
	}
	return true
}

// Values returns s by field name, the limits of scope sc: a nil value sets
// no limit.
func (s *LimitSet) Values(sc Scope) map[string]*int64 {
	m := make(map[string]*int64, len(s))
	for f := range FieldsIn(sc) {
		m[f.Name] = s[f.id]
	}
	return m
}

// ValidateFields returns the problems of s, a set of limits of scope sc,
// each field named with prefix ("account."), by the rules of a tier's
// limits: an unset limit has none, and a limit outside sc is one.
func (s *LimitSet) ValidateFields(sc Scope, prefix string) []FieldError {
	errs := outOfScope(sc, prefix, func(f *LimitField) bool { return s[f.id] != nil })
	return append(errs, fieldErrors(limitProblems(prefix, func(f *LimitField) (int64, bool) {
		if v := s.Get(f); v != nil && f.In(sc) {
			return *v, true
		}
		return 0, false
	}))...)
}

// outOfScope returns a problem for each limit set reports set that a set
// of scope sc cannot hold, each named with prefix.
func outOfScope(sc Scope, prefix string, set func(*LimitField) bool) []FieldError {
	var errs []FieldError
	for i := range LimitFields {
		if f := &LimitFields[i]; !f.In(sc) && set(f) {
			errs = append(errs, FieldError{prefix + f.Name, prefix + f.Name + " cannot be set here: " + scopeWords(f.Scopes)})
		}
	}
	return errs
}

// scopeWords says where a limit of scopes s belongs.
func scopeWords(s Scope) string {
	if s == ScopeRun {
		return "it is a limit of a run, set in the tier's run object"
	}
	return "it is not a limit of this set"
}

// Value returns f's value in t; ok is false when f is optional and t sets
// no such limit. A required limit t leaves unset reads as 0.
func (f *LimitField) Value(t *Tier) (v int64, ok bool) {
	if p := t.Limits[f.id]; p != nil {
		return *p, true
	}
	return 0, !f.Optional
}

// Get returns f's value in t as the wire has it: nil when unset, else a
// copy.
func (f *LimitField) Get(t *Tier) *int64 {
	v, ok := f.Value(t)
	if !ok {
		return nil
	}
	return &v
}

// Set sets f in t to v: nil unsets an optional limit, and sets a required
// one to 0. t keeps no reference to v.
func (f *LimitField) Set(t *Tier, v *int64) {
	if v == nil && !f.Optional {
		v = new(int64(0))
	}
	t.Limits.Set(f, v)
}

// InRequestLimits reports whether f is one of the limits shadow limits,
// previews and the replay of a user's overrides hold: a tier's request
// limits and its burst allowance.
func (f *LimitField) InRequestLimits() bool {
	return (f.Kind == KindRequests || f.Kind == KindBurst) && f.In(ScopeTier)
}

// LimitNames are the names of the rows of LimitFields in ScopeTier, in
// order: the limits a user's record can override, as the API and the
// tiers file name them.
var LimitNames = func() (names []string) {
	for f := range FieldsIn(ScopeTier) {
		names = append(names, f.Name)
	}
	return names
}()

// LimitFieldNamed returns the limit named name; ok is false when there is none.
func LimitFieldNamed(name string) (f *LimitField, ok bool) {
	for i := range LimitFields {
		if LimitFields[i].Name == name {
			return &LimitFields[i], true
		}
	}
	return nil, false
}

// InRange reports whether v is a value of f: from f.Min (0 but for a
// run's max_depth) to f.Max.
func (f *LimitField) InRange(v int64) bool { return v >= f.Min && v <= f.Max }

// rangeMessage is the message of a value of f, named field, out of range.
func (f *LimitField) rangeMessage(field string) string {
	if f.Kind == KindCost {
		return fmt.Sprintf("%s must be a dollar amount from %s to %s", field, f.Format(0), f.Format(f.Max))
	}
	return fmt.Sprintf("%s must be an integer from %d to %d", field, f.Min, f.Max)
}

// limitProblem is one problem of a set of limits: field's value out of
// range (shorter nil), or below the limit of the shorter window shorter.
type limitProblem struct {
	field, shorter *LimitField
	FieldError
}

// limitProblems returns the problems of the limits value reads, in the
// order of LimitFields: a value out of range, and a limit of a longer
// window below the one of the nearest shorter window of the same kind that
// is set, which could never bind because the shorter one would refuse
// first. value returns the limit's value, ok false when it is unset (or
// does not apply); prefix is written before each field's name. A limit out
// of range is compared with none. The minute's request limit is compared
// without its burst allowance: a burst lets a short spike through the
// minute window, and the hour and day are there to cap it.
func limitProblems(prefix string, value func(f *LimitField) (int64, bool)) []limitProblem {
	var problems []limitProblem
	// The nearest shorter window of each kind that is set.
	var last [numKinds]struct {
		f *LimitField
		v int64
	}
	for i := range LimitFields {
		f := &LimitFields[i]
		v, ok := value(f)
		switch {
		case !ok:
		case !f.InRange(v):
			name := prefix + f.Name
			problems = append(problems, limitProblem{f, nil, FieldError{name, f.rangeMessage(name)}})
		case f.Windowed && f.Kind != KindBurst:
			if s := last[f.Kind]; s.f != nil && v < s.v {
				problems = append(problems, limitProblem{f, s.f, FieldError{prefix + f.Name,
					fmt.Sprintf("%s%s (%s) is below %s%s (%s): the %s would refuse first", prefix, f.Name, f.Format(v), prefix, s.f.Name, s.f.Format(s.v), f.Window)}})
			}
			last[f.Kind].f, last[f.Kind].v = f, v
		}
	}
	return problems
}

// fieldErrors returns the FieldErrors of problems.
func fieldErrors(problems []limitProblem) []FieldError {
	var errs []FieldError
	for _, p := range problems {
		errs = append(errs, p.FieldError)
	}
	return errs
}

// validateLimits returns the problems of t's limits, in the order of
// LimitFields (see limitProblems): a limit outside ScopeTier is one.
func (t *Tier) validateLimits() []FieldError {
	errs := outOfScope(ScopeTier, "", func(f *LimitField) bool { return t.Limits[f.id] != nil })
	return append(errs, fieldErrors(limitProblems("", func(f *LimitField) (int64, bool) {
		if !f.In(ScopeTier) {
			return 0, false
		}
		return f.Value(t)
	}))...)
}

// validate returns the problems of l, naming each field with prefix, and
// those of its Account with prefix+"account.": a limit RequestLimits does
// not hold is one, in either.
func (l *RequestLimits) validate(prefix string) []FieldError {
	errs := fieldErrors(limitProblems(prefix, l.value))
	for i := range LimitFields {
		if f := &LimitFields[i]; !f.InRequestLimits() && l.Limits[i] != nil {
			errs = append(errs, FieldError{prefix + f.Name, prefix + f.Name + " cannot be set: only request limits and the burst allowance are shadowed"})
		}
	}
	if a := l.Account; a != nil {
		pre := prefix + "account."
		for i := range LimitFields {
			if f := &LimitFields[i]; !f.InRequestLimits() && a[i] != nil {
				errs = append(errs, FieldError{pre + f.Name, pre + f.Name + " cannot be set: only request limits and the burst allowance are replayed and shadowed"})
			}
		}
		errs = append(errs, a.ValidateFields(ScopeAccount, pre)...)
	}
	return errs
}

// sameValue reports whether a and b are both nil or point to equal values.
func sameValue(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// sameLimitValues reports whether a and b set the same limits to the same
// values.
func sameLimitValues(a, b *Tier) bool {
	for f := range FieldsIn(ScopeTier) {
		x, xok := f.Value(a)
		y, yok := f.Value(b)
		if xok != yok || x != y {
			return false
		}
	}
	return true
}

// Override replaces one optional limit of a tier (a token window or
// max_concurrent) for one user. The zero value replaces nothing.
type Override struct {
	// Set reports whether the user's limit replaces the tier's.
	Set bool
	// Limit is the user's limit when Set; nil removes the tier's limit.
	Limit *int64
}

// To returns an override setting the limit to v.
func To(v int64) Override { return Override{Set: true, Limit: &v} }

// Unlimited is the override that removes a tier's optional limit.
var Unlimited = Override{Set: true}

// Overrides are a record's overrides of the limits it would otherwise be
// checked under, one per row of LimitFields: a user record's of its tier's
// limits, an account record's of its plan's pooled limits. An Override not
// Set keeps the limit; Set with a nil Limit removes it, which a user's
// record may do only to an optional limit. The zero value overrides
// nothing.
type Overrides [numLimits]Override

// Get returns what o does to f.
func (o *Overrides) Get(f *LimitField) Override { return o[f.id] }

// Set makes o do v to f.
func (o *Overrides) Set(f *LimitField, v Override) { o[f.id] = v }

// IsZero reports whether o overrides nothing.
func (o *Overrides) IsZero() bool { return o.Equal(&Overrides{}) }

// Equal reports whether o and q override the same limits with the same
// values.
func (o *Overrides) Equal(q *Overrides) bool {
	for i := range o {
		if o[i].Set != q[i].Set || o[i].Set && !sameValue(o[i].Limit, q[i].Limit) {
			return false
		}
	}
	return true
}

// Values returns the limits o overrides, by name: a nil value removes the
// limit. It returns nil when o overrides nothing.
func (o *Overrides) Values() map[string]*int64 {
	var m map[string]*int64
	for i := range LimitFields {
		if o[i].Set {
			if m == nil {
				m = make(map[string]*int64)
			}
			m[LimitFields[i].Name] = o[i].Limit
		}
	}
	return m
}

// ValidateFields returns every value of o out of range, in field order,
// each named with prefix ("limits.") and worded as a tier's, and every
// limit o sets that a set of scope sc does not hold (a user's overrides
// are ScopeTier's, an account's ScopeAccount's). Whether the limits could
// all bind depends on the limits they apply to: see ValidateOn.
func (o *Overrides) ValidateFields(sc Scope, prefix string) []FieldError {
	errs := outOfScope(sc, prefix, func(f *LimitField) bool { return o[f.id].Set })
	for _, p := range limitProblems(prefix, o.value) {
		if p.shorter == nil {
			errs = append(errs, p.FieldError)
		}
	}
	return errs
}

// value returns the limit o sets f to; ok is false when o keeps the limit
// or removes it.
func (o *Overrides) value(f *LimitField) (int64, bool) {
	if v := o[f.id]; v.Set && v.Limit != nil {
		return *v.Limit, true
	}
	return 0, false
}

// ValidateOn returns the limits of t with o's overrides applied (see
// WithOverrides) that could not all bind, worded as a tier's, when o
// overrides one of the two limits compared: the problem names the field of
// o to change (the longer window's when o sets both). Problems of t's own,
// and values out of range (see ValidateFields), are not o's to report.
// With t nil, the limits o sets are compared among themselves, as on any
// tier.
func (o *Overrides) ValidateOn(t *Tier) []FieldError {
	value := o.value
	if t != nil {
		merged := t.WithOverrides(*o)
		value = func(f *LimitField) (int64, bool) { return f.Value(&merged) }
	}
	var errs []FieldError
	for _, p := range limitProblems("", value) {
		switch {
		case p.shorter == nil:
		case o.Get(p.field).Set:
			errs = append(errs, p.FieldError)
		case o.Get(p.shorter).Set:
			errs = append(errs, FieldError{p.shorter.Name, p.Message})
		}
	}
	return errs
}

// WithOverrides returns t with the limits o sets replaced; its name,
// features, models and description stay the tier's. A required limit
// cannot be removed: an Override of one Set with a nil Limit keeps the
// tier's.
func (t Tier) WithOverrides(o Overrides) Tier {
	for i := range LimitFields {
		// The tier shares the record's value, as the record does its own.
		if v := o[i]; v.Set && (v.Limit != nil || LimitFields[i].Optional) {
			t.Limits[i] = v.Limit
		}
	}
	return t
}

// WithOverrides returns s with the limits o sets replaced: pooled limits
// are all optional, so any may be removed.
func (s LimitSet) WithOverrides(o Overrides) LimitSet {
	for i := range o {
		if o[i].Set {
			s[i] = o[i].Limit
		}
	}
	return s
}

// NullRequiredLimit is the message of a required limit, named field
// ("burst_allowance", "shadow.burst_allowance"), given as null: only the
// optional limits can be removed.
func NullRequiredLimit(field string) string {
	return limitFieldOf(field).rangeMessage(field) + " (only the optional limits can be null)"
}

// limitFieldOf returns the limit field names by its last dotted part
// ("shadow.requests_per_minute"), or, for a name that is no limit's, a
// count up to MaxLimit.
func limitFieldOf(field string) *LimitField {
	if f, ok := LimitFieldNamed(field[strings.LastIndexByte(field, '.')+1:]); ok {
		return f
	}
	return &LimitField{Name: field, Kind: KindRequests, Max: MaxLimit}
}

// LimitsOf returns the user's Overrides whose Values are values. A name
// that is not one of LimitNames, or a nil required limit (only the
// optional limits can be removed), is an EINVALID error naming it; values
// are not checked against their range (see Overrides.ValidateFields).
func LimitsOf(values map[string]*int64) (Overrides, error) {
	var o Overrides
	for _, name := range sortedKeys(values) {
		v := values[name]
		f, ok := LimitFieldNamed(name)
		switch {
		case !ok || !f.In(ScopeTier):
			return Overrides{}, Errorf(EINVALID, "unknown field %s in limits", Quote(name))
		case !f.Optional && v == nil:
			return Overrides{}, Errorf(EINVALID, "%s", NullRequiredLimit(name))
		}
		o[f.id] = Override{Set: true, Limit: v}
	}
	return o, nil
}

// PoolOverridesOf returns an account's Overrides whose Values are values:
// any limit may be removed. An unknown name is an EINVALID error naming
// it.
func PoolOverridesOf(values map[string]*int64) (Overrides, error) {
	var o Overrides
	for _, name := range sortedKeys(values) {
		f, ok := LimitFieldNamed(name)
		if !ok || !f.In(ScopeAccount) {
			return Overrides{}, Errorf(EINVALID, "unknown field %s in limits", Quote(name))
		}
		o[f.id] = Override{Set: true, Limit: values[name]}
	}
	return o, nil
}

// PoolLimitsOf returns the pooled LimitSet whose Values are values; a name
// missing sets no limit. An unknown name, or one outside ScopeAccount, is
// an EINVALID error naming it.
func PoolLimitsOf(values map[string]*int64) (LimitSet, error) {
	return limitSetOf(ScopeAccount, "account", values)
}

// RunLimitsOf returns the run's LimitSet (Tier.Run) whose Values are
// values; a name missing sets no limit. An unknown name, or one outside
// ScopeRun, is an EINVALID error naming it.
func RunLimitsOf(values map[string]*int64) (LimitSet, error) {
	return limitSetOf(ScopeRun, "run", values)
}

// limitSetOf returns the LimitSet of scope sc whose values are values,
// naming the set in the error of a name it cannot hold.
func limitSetOf(sc Scope, set string, values map[string]*int64) (LimitSet, error) {
	var s LimitSet
	for _, name := range sortedKeys(values) {
		f, ok := LimitFieldNamed(name)
		if !ok || !f.In(sc) {
			return LimitSet{}, Errorf(EINVALID, "unknown field %s in %s", Quote(name), set)
		}
		s.Set(f, values[name])
	}
	return s, nil
}

func sortedKeys(m map[string]*int64) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
