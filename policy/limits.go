package policy

import (
	"fmt"
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

	// id says where the limit lives in the domain types (see onTier).
	id limitID
}

// limitID names a limit for the functions that find it in the domain
// types.
type limitID int

const (
	requestsPerMinute limitID = iota
	requestsPerHour
	requestsPerDay
	burstAllowance
	tokensPerMinute
	tokensPerHour
	tokensPerDay
	maxConcurrent
)

// LimitFields lists every limit of a tier, in the order the API, the tiers
// file and the admin page show them; within a kind, the windows run from
// the shortest to the longest. Every surface that lists limits walks this
// table. Adding a limit adds a row here, with an id and its cases in
// onTier, onLimits and onRequestLimits below, and a field to the types
// they point to (Tier, Limits, and RequestLimits for a request limit);
// then to the wire type, the client, the database row and a migration.
//
// The users table keeps which optional limits a record overrides as a bit
// each, in the order of the optional rows here: a new optional limit goes
// after the last one.
var LimitFields = [...]LimitField{
	{id: requestsPerMinute, Name: "requests_per_minute", Label: "Requests per minute", Kind: KindRequests, Window: Minute, Windowed: true},
	{id: requestsPerHour, Name: "requests_per_hour", Label: "Requests per hour", Kind: KindRequests, Window: Hour, Windowed: true},
	{id: requestsPerDay, Name: "requests_per_day", Label: "Requests per day", Kind: KindRequests, Window: Day, Windowed: true},
	{id: burstAllowance, Name: "burst_allowance", Label: "Burst allowance", Doc: "Extra requests the minute window admits.",
		Kind: KindBurst, Window: Minute, Windowed: true},
	{id: tokensPerMinute, Name: "tokens_per_minute", Label: "Tokens per minute", Kind: KindTokens, Window: Minute, Windowed: true, Optional: true},
	{id: tokensPerHour, Name: "tokens_per_hour", Label: "Tokens per hour", Kind: KindTokens, Window: Hour, Windowed: true, Optional: true},
	{id: tokensPerDay, Name: "tokens_per_day", Label: "Tokens per day", Kind: KindTokens, Window: Day, Windowed: true, Optional: true},
	{id: maxConcurrent, Name: "max_concurrent", Label: "Max concurrent calls", Doc: "Calls open at once.", Kind: KindConcurrency, Optional: true},
}

// onTier returns where f lives in t: req for a required limit, opt for an
// optional one. (A switch rather than a function per row, so that finding
// a limit leaves t where it is: checks call this for every limit.)
func (f *LimitField) onTier(t *Tier) (req *int64, opt **int64) {
	switch f.id {
	case requestsPerMinute:
		return &t.RequestsPerMinute, nil
	case requestsPerHour:
		return &t.RequestsPerHour, nil
	case requestsPerDay:
		return &t.RequestsPerDay, nil
	case burstAllowance:
		return &t.BurstAllowance, nil
	case tokensPerMinute:
		return nil, &t.TokensPerMinute
	case tokensPerHour:
		return nil, &t.TokensPerHour
	case tokensPerDay:
		return nil, &t.TokensPerDay
	case maxConcurrent:
		return nil, &t.MaxConcurrent
	}
	return nil, nil
}

// onLimits returns where f lives in l: req for a required limit, opt for
// an optional one.
func (f *LimitField) onLimits(l *Limits) (req **int64, opt *Override) {
	switch f.id {
	case requestsPerMinute:
		return &l.RequestsPerMinute, nil
	case requestsPerHour:
		return &l.RequestsPerHour, nil
	case requestsPerDay:
		return &l.RequestsPerDay, nil
	case burstAllowance:
		return &l.BurstAllowance, nil
	case tokensPerMinute:
		return nil, &l.TokensPerMinute
	case tokensPerHour:
		return nil, &l.TokensPerHour
	case tokensPerDay:
		return nil, &l.TokensPerDay
	case maxConcurrent:
		return nil, &l.MaxConcurrent
	}
	return nil, nil
}

// onRequestLimits returns where f lives in l, nil when RequestLimits has
// no such field.
func (f *LimitField) onRequestLimits(l *RequestLimits) *int64 {
	switch f.id {
	case requestsPerMinute:
		return &l.RequestsPerMinute
	case requestsPerHour:
		return &l.RequestsPerHour
	case requestsPerDay:
		return &l.RequestsPerDay
	case burstAllowance:
		return &l.BurstAllowance
	}
	return nil
}

// LimitNames are the names of LimitFields, in order: the limits a user's
// record can override, as the API and the tiers file name them.
var LimitNames = func() (names [len(LimitFields)]string) {
	for i := range LimitFields {
		names[i] = LimitFields[i].Name
	}
	return names
}()

// tokenFields holds the token limit of each window, nil for none.
var tokenFields = func() (fs [len(Windows)]*LimitField) {
	for i := range LimitFields {
		if f := &LimitFields[i]; f.Kind == KindTokens {
			fs[f.Window] = f
		}
	}
	return fs
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

// Value returns f's value in t; ok is false when f is optional and t sets
// no such limit.
func (f *LimitField) Value(t *Tier) (v int64, ok bool) {
	req, opt := f.onTier(t)
	switch {
	case req != nil:
		return *req, true
	case *opt != nil:
		return **opt, true
	}
	return 0, false
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
	req, opt := f.onTier(t)
	switch {
	case req != nil && v == nil:
		*req = 0
	case req != nil:
		*req = *v
	case v == nil:
		*opt = nil
	default:
		c := *v
		*opt = &c
	}
}

// Override returns what l does to f: for a required limit, Set when l
// replaces it, with its Limit never nil.
func (f *LimitField) Override(l *Limits) Override {
	req, opt := f.onLimits(l)
	if opt != nil {
		return *opt
	}
	return Override{Set: *req != nil, Limit: *req}
}

// SetOverride makes l do o to f. A required limit cannot be removed: o Set
// with a nil Limit keeps the tier's value, as the zero Override does.
func (f *LimitField) SetOverride(l *Limits, o Override) {
	req, opt := f.onLimits(l)
	switch {
	case opt != nil:
		*opt = o
	case o.Set:
		*req = o.Limit
	default:
		*req = nil
	}
}

// InRequestLimits reports whether RequestLimits holds f: the request
// limits and the burst allowance, which shadow limits, previews and the
// replay of a user's overrides use.
func (f *LimitField) InRequestLimits() bool { return f.onRequestLimits(&RequestLimits{}) != nil }

// RequestLimit returns where f lives in l, or nil when RequestLimits holds
// no such limit (see InRequestLimits) or l is nil.
func (f *LimitField) RequestLimit(l *RequestLimits) *int64 {
	if l == nil {
		return nil
	}
	return f.onRequestLimits(l)
}

// inRange reports whether v is a limit value.
func inRange(v int64) bool { return v >= 0 && v <= MaxLimit }

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
	var last [KindConcurrency + 1]struct {
		f *LimitField
		v int64
	}
	for i := range LimitFields {
		f := &LimitFields[i]
		v, ok := value(f)
		switch {
		case !ok:
		case !inRange(v):
			name := prefix + f.Name
			problems = append(problems, limitProblem{f, nil, FieldError{name, fmt.Sprintf("%s must be an integer from 0 to %d", name, MaxLimit)}})
		case f.Windowed && (f.Kind == KindRequests || f.Kind == KindTokens):
			if s := last[f.Kind]; s.f != nil && v < s.v {
				problems = append(problems, limitProblem{f, s.f, FieldError{prefix + f.Name,
					fmt.Sprintf("%s%s (%d) is below %s%s (%d): the %s would refuse first", prefix, f.Name, v, prefix, s.f.Name, s.v, f.Window)}})
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
// LimitFields (see limitProblems).
func (t *Tier) validateLimits() []FieldError {
	return fieldErrors(limitProblems("", func(f *LimitField) (int64, bool) { return f.Value(t) }))
}

// validate returns the problems of l, naming each field with prefix, and
// those of its Account with prefix+"account.": a limit RequestLimits does
// not hold is one.
func (l *RequestLimits) validate(prefix string) []FieldError {
	errs := fieldErrors(limitProblems(prefix, func(f *LimitField) (int64, bool) {
		if p := f.RequestLimit(l); p != nil {
			return *p, true
		}
		return 0, false
	}))
	if a := l.Account; a != nil {
		pre := prefix + "account."
		for i := range LimitFields {
			if f := &LimitFields[i]; !f.InRequestLimits() && a[i] != nil {
				errs = append(errs, FieldError{pre + f.Name, pre + f.Name + " cannot be set: only request limits and the burst allowance are replayed and shadowed"})
			}
		}
		errs = append(errs, a.ValidateFields(pre)...)
	}
	return errs
}

// sameValue reports whether a and b are both nil or point to equal values.
func sameValue(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// sameLimitValues reports whether a and b set the same limits to the same
// values.
func sameLimitValues(a, b *Tier) bool {
	for i := range LimitFields {
		f := &LimitFields[i]
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

// Limits are a user's overrides of their tier's limits, field by field: a
// nil request limit, or an Override not Set, keeps the tier's value. The
// zero value overrides nothing.
type Limits struct {
	RequestsPerMinute, RequestsPerHour, RequestsPerDay, BurstAllowance *int64
	TokensPerMinute, TokensPerHour, TokensPerDay, MaxConcurrent        Override
}

// IsZero reports whether l overrides nothing.
func (l Limits) IsZero() bool { return l.Equal(Limits{}) }

// Equal reports whether l and m override the same limits with the same
// values.
func (l Limits) Equal(m Limits) bool {
	for i := range LimitFields {
		a, b := LimitFields[i].Override(&l), LimitFields[i].Override(&m)
		if a.Set != b.Set || a.Set && !sameValue(a.Limit, b.Limit) {
			return false
		}
	}
	return true
}

// ValidateFields returns every value of l out of range, in field order,
// worded as a tier's. Whether the limits could all bind depends on the
// tier they apply to: see ValidateOn.
func (l *Limits) ValidateFields() []FieldError {
	var errs []FieldError
	for _, p := range limitProblems("", l.value) {
		if p.shorter == nil {
			errs = append(errs, p.FieldError)
		}
	}
	return errs
}

// value returns the limit l sets f to; ok is false when l keeps the tier's
// or removes it.
func (l *Limits) value(f *LimitField) (int64, bool) {
	o := f.Override(l)
	if !o.Set || o.Limit == nil {
		return 0, false
	}
	return *o.Limit, true
}

// ValidateOn returns the limits of t with l's overrides applied (see
// WithOverrides) that could not all bind, worded as a tier's, when l
// overrides one of the two limits compared: the problem names the field of
// l to change (the longer window's when l sets both). Problems of t's own,
// and values out of range (see ValidateFields), are not l's to report.
// With t nil, the limits l sets are compared among themselves, as on any
// tier.
func (l *Limits) ValidateOn(t *Tier) []FieldError {
	value := l.value
	if t != nil {
		merged := t.WithOverrides(*l)
		value = func(f *LimitField) (int64, bool) { return f.Value(&merged) }
	}
	var errs []FieldError
	for _, p := range limitProblems("", value) {
		switch {
		case p.shorter == nil:
		case p.field.Override(l).Set:
			errs = append(errs, p.FieldError)
		case p.shorter.Override(l).Set:
			errs = append(errs, FieldError{p.shorter.Name, p.Message})
		}
	}
	return errs
}

// WithOverrides returns t with the limits l sets replaced; its name,
// features, models and description stay the tier's.
func (t Tier) WithOverrides(l Limits) Tier {
	for i := range LimitFields {
		f := &LimitFields[i]
		o := f.Override(&l)
		if !o.Set {
			continue
		}
		// The tier shares the record's value, as the record does its own.
		if req, opt := f.onTier(&t); req != nil {
			*req = *o.Limit // set, so not nil (see Override)
		} else {
			*opt = o.Limit
		}
	}
	return t
}

// Values returns the limits l overrides, by name: a nil value removes an
// optional limit. It returns nil when l overrides nothing.
func (l Limits) Values() map[string]*int64 {
	var m map[string]*int64
	for i := range LimitFields {
		if o := LimitFields[i].Override(&l); o.Set {
			if m == nil {
				m = make(map[string]*int64)
			}
			m[LimitFields[i].Name] = o.Limit
		}
	}
	return m
}

// NullRequiredLimit is the message of a required limit, named field
// ("burst_allowance", "shadow.burst_allowance"), given as null: only the
// optional limits can be removed.
func NullRequiredLimit(field string) string {
	return fmt.Sprintf("%s must be an integer from 0 to %d (only token limits and max_concurrent can be null)", field, MaxLimit)
}

// LimitsOf returns the Limits whose Values are values. A name that is not
// one of LimitNames, or a nil request limit (only the optional limits can
// be removed), is an EINVALID error naming it; values are not checked
// against their range (see Limits.ValidateFields).
func LimitsOf(values map[string]*int64) (Limits, error) {
	var l Limits
	for _, name := range sortedKeys(values) {
		v := values[name]
		f, ok := LimitFieldNamed(name)
		switch {
		case !ok:
			return Limits{}, Errorf(EINVALID, "unknown field %s in limits", Quote(name))
		case !f.Optional && v == nil:
			return Limits{}, Errorf(EINVALID, "%s", NullRequiredLimit(name))
		}
		f.SetOverride(&l, Override{Set: true, Limit: v})
	}
	return l, nil
}
