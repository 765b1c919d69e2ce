package policy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Price is what a model costs, in dollars per million tokens of each kind.
// A price list names a model exactly ("gpt-4o") or by a prefix ending in
// '*' ("gpt-4o-*", or "*" for every model), and optionally one upstream of
// the gateway, which then has it alone.
type Price struct {
	Model    string // exact name, or a prefix followed by '*'
	Upstream string // "" for every upstream

	Input      Money // per million prompt tokens not read from a cache
	Output     Money // per million completion tokens, reasoning included
	CacheRead  Money // per million prompt tokens read from the provider's cache
	CacheWrite Money // per million prompt tokens written to the provider's cache
}

// TokenUsage counts the tokens of one call by the price each is billed at.
type TokenUsage struct {
	Input      int64
	Output     int64
	CacheRead  int64
	CacheWrite int64
}

// Cost returns what u costs at p, rounded up to the picodollar once for
// the whole call (never per kind of token, so that a call of many kinds is
// not overcharged by several units). Its error is EINVALID for a negative
// count and when the cost exceeds MaxMoney.
func (p *Price) Cost(u TokenUsage) (Money, error) {
	c, ok := costSum([]int64{u.Input, u.Output, u.CacheRead, u.CacheWrite},
		[]Money{p.Input, p.Output, p.CacheRead, p.CacheWrite})
	if !ok {
		if u.Input < 0 || u.Output < 0 || u.CacheRead < 0 || u.CacheWrite < 0 {
			return 0, Errorf(EINVALID, "token counts must not be negative")
		}
		return 0, Errorf(EINVALID, "the cost of %d input and %d output tokens of %s exceeds %s dollars",
			u.Input+u.CacheRead+u.CacheWrite, u.Output, Quote(p.Model), MaxMoney)
	}
	return c, nil
}

// MaxPrice returns the highest of p's four prices: what a token of unknown
// kind is reserved at, so that a reservation never falls short of the
// usage it stands for, whatever kind each token turns out to be.
func (p *Price) MaxPrice() Money { return max(p.Input, p.Output, p.CacheRead, p.CacheWrite) }

// PriceTable is a validated list of prices with its lookup. It is
// immutable, and so safe for concurrent use. The zero value prices
// nothing.
//
// Lookup rule: the entries of the call's upstream come first, then the
// generic ones (no upstream); within each, an entry naming the model
// exactly wins, then the one with the longest '*' prefix of it. So an
// operator's entry for one upstream is never shadowed by a generic entry,
// however precise, and "gpt-4o-mini" beats "gpt-4o*", which beats "gpt-*".
type PriceTable struct {
	entries []Price             // sorted by model, then upstream
	exact   map[priceKey]*Price // exact names
	prefix  map[priceKey]*Price // '*' entries, by their prefix without the '*'
	// lengths lists, per upstream, the lengths of its prefixes, longest
	// first: a lookup tries the model's own prefixes of those lengths
	// only, a map read each, however many entries the table has.
	lengths map[string][]int
}

type priceKey struct{ model, upstream string }

// MaxPrices is how many entries a price table holds at most.
const MaxPrices = 20_000

// NewPriceTable validates entries and returns their table. Its error is
// EINVALID and names the first bad entry: an empty or malformed model, a
// '*' anywhere but last, a negative price, or the same model and upstream
// listed twice. The table keeps its own copy of entries.
func NewPriceTable(entries []Price) (*PriceTable, error) {
	errs := ValidatePrices(entries)
	if len(errs) > 0 {
		return nil, &Error{Code: EINVALID, Message: errs[0].Message}
	}
	t := &PriceTable{
		entries: slices.Clone(entries),
		exact:   make(map[priceKey]*Price),
		prefix:  make(map[priceKey]*Price),
		lengths: make(map[string][]int),
	}
	slices.SortFunc(t.entries, func(a, b Price) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return strings.Compare(a.Upstream, b.Upstream)
	})
	for i := range t.entries {
		p := &t.entries[i]
		if pre, ok := strings.CutSuffix(p.Model, "*"); ok {
			t.prefix[priceKey{pre, p.Upstream}] = p
			if !slices.Contains(t.lengths[p.Upstream], len(pre)) {
				t.lengths[p.Upstream] = append(t.lengths[p.Upstream], len(pre))
			}
		} else {
			t.exact[priceKey{p.Model, p.Upstream}] = p
		}
	}
	for _, l := range t.lengths {
		slices.Sort(l)
		slices.Reverse(l)
	}
	return t, nil
}

// ValidatePrices returns what is wrong with entries, one FieldError per
// fault, each naming its field as prices[i].field. It does not stop at the
// first.
func ValidatePrices(entries []Price) []FieldError {
	var errs []FieldError
	if len(entries) > MaxPrices {
		return []FieldError{{"prices", "prices must list at most " + GroupDigits(MaxPrices) + " entries"}}
	}
	seen := make(map[priceKey]int, len(entries))
	bad := func(field, msg string) { errs = append(errs, FieldError{field, field + " " + msg}) }
	for i := range entries {
		p := &entries[i]
		field := "prices[" + strconv.Itoa(i) + "]."
		switch {
		case p.Model == "":
			bad(field+"model", "is required")
		case !validModelChars(p.Model):
			bad(field+"model", "must be 1 to "+strconv.Itoa(MaxModelName)+" printable characters without spaces")
		case strings.Contains(strings.TrimSuffix(p.Model, "*"), "*"):
			bad(field+"model", "may hold '*' only as its last character")
		}
		if p.Upstream != "" && !validModelChars(p.Upstream) {
			bad(field+"upstream", "must be printable characters without spaces")
		}
		for _, f := range []struct {
			name string
			v    Money
		}{{"input", p.Input}, {"output", p.Output}, {"cache_read", p.CacheRead}, {"cache_write", p.CacheWrite}} {
			if f.v < 0 {
				bad(field+f.name, "must not be negative")
			}
		}
		k := priceKey{p.Model, p.Upstream}
		if j, dup := seen[k]; dup && p.Model != "" {
			what := Quote(p.Model)
			if p.Upstream != "" {
				what += " for upstream " + Quote(p.Upstream)
			}
			bad(field+"model", "lists "+what+" again (first at prices["+strconv.Itoa(j)+"])")
		} else {
			seen[k] = i
		}
	}
	return errs
}

// Len returns the number of entries.
func (t *PriceTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Entries returns a copy of the entries, sorted by model, then upstream.
func (t *PriceTable) Entries() []Price {
	if t == nil {
		return nil
	}
	return slices.Clone(t.entries)
}

// Lookup returns the price of model called through upstream ("" when the
// call names none) under the rule PriceTable states; ok is false when no
// entry applies.
func (t *PriceTable) Lookup(model, upstream string) (p Price, ok bool) {
	if t == nil {
		return Price{}, false
	}
	ups := []string{""}
	if upstream != "" {
		ups = []string{upstream, ""}
	}
	for _, up := range ups {
		if e := t.exact[priceKey{model, up}]; e != nil {
			return *e, true
		}
		for _, n := range t.lengths[up] {
			if n > len(model) {
				continue
			}
			if e := t.prefix[priceKey{model[:n], up}]; e != nil {
				return *e, true
			}
		}
	}
	return Price{}, false
}

// PriceVersion is one version of the price table: the whole table, in
// force from EffectiveFrom until the next version's EffectiveFrom. Versions
// are never changed once saved; a new price is a new version, so a call is
// always priced as it was when admitted.
type PriceVersion struct {
	// ID orders versions by when they were made; 0 until saved.
	ID            int64
	EffectiveFrom time.Time
	// CreatedAt is when the version was saved, and Source the path it came
	// through (one of the Source constants): the versions are their own
	// audit log.
	CreatedAt time.Time
	Source    string
	Prices    *PriceTable
}

// InForce returns the version of versions in force at t: the one with the
// latest EffectiveFrom not after t, and of those the latest made (highest
// ID). ok is false when none is.
func InForce(versions []PriceVersion, t time.Time) (v PriceVersion, ok bool) {
	for i := range versions {
		c := &versions[i]
		if c.EffectiveFrom.After(t) {
			continue
		}
		if !ok || c.EffectiveFrom.After(v.EffectiveFrom) || (c.EffectiveFrom.Equal(v.EffectiveFrom) && c.ID > v.ID) {
			v, ok = *c, true
		}
	}
	return v, ok
}

// PriceStore keeps the versions of the price table. Implementations are
// safe for concurrent use.
type PriceStore interface {
	// SavePrices stores v as a new version and returns it with its ID and
	// CreatedAt set (CreatedAt is at, the time of the change).
	SavePrices(ctx context.Context, v PriceVersion, at time.Time) (PriceVersion, error)
	// PricesAt returns the version in force at t (see InForce), reading
	// every version committed before the call, or an ENOTFOUND error.
	PricesAt(ctx context.Context, t time.Time) (PriceVersion, error)
	// PriceVersions returns every version, newest ID first.
	PriceVersions(ctx context.Context) ([]PriceVersion, error)
	// PriceOf returns the price of model through upstream under the
	// version in force at t, from memory, reading no storage, so that
	// pricing a call costs no query; version is that version's ID. ok is
	// false when no version is in force or it prices no such model. A
	// version another process saved is seen within a moment (the store
	// says how soon).
	PriceOf(model, upstream string, t time.Time) (p Price, version int64, ok bool)
}
