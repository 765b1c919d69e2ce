package api

import (
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/policyguard/policyguard/policy"
)

// How a limit's value crosses the wire is decided here, by its row of
// policy.LimitFields: a spend limit (policy.KindCost) is an amount of US
// dollars as a decimal string, exact to the picodollar ("20", "0.15"),
// as every amount on the wire; any other limit is an integer. Either is
// null for none. Tiers (writeLimits, readLimit), user records' and
// accounts' limits (limitValuesJSON, readLimitValue) and the tiers file,
// which holds those, all come here.

// limitToken returns v, a value of limit f, as the wire writes it.
func limitToken(f *policy.LimitField, v int64) jsontext.Token {
	if f.Kind == policy.KindCost {
		return jsontext.String(policy.Money(v).String())
	}
	return jsontext.Int(v)
}

// spendMessage is the message of a value of a spend limit, named field,
// that is not a decimal string of dollars.
func spendMessage(field string) string {
	return field + ` must be null or a dollar amount as a decimal string, such as "20" or "0.15"`
}

// readSpend reads raw, a value of spend limit f named field: null (nil)
// or a decimal string of dollars. Its errors are EINVALID and name field:
// a value of another type or form, an amount finer than a picodollar or
// larger than the largest (ParseMoney's reason), or a negative one.
func readSpend(f *policy.LimitField, field string, raw jsontext.Value) (*int64, error) {
	switch raw.Kind() {
	case 'n':
		return nil, nil
	case '"':
	default:
		return nil, policy.Errorf(policy.EINVALID, "%s", spendMessage(field))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, policy.Errorf(policy.EINVALID, "%s", spendMessage(field))
	}
	v, err := f.ParseAmount(field, s, spendMessage(field))
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// spendJSON is a spend limit as a tier body holds it (see readLimit):
// null for none, else a decimal string of dollars. It names the field it
// is read from by the decoder's position, so that decodeTier can note
// the problem of a wrong one beside the others.
type spendJSON struct{ v *int64 }

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (j *spendJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	field := fieldPath(dec)
	raw, err := dec.ReadValue()
	if err != nil {
		return err
	}
	f, _ := policy.LimitFieldNamed(field[strings.LastIndexByte(field, '.')+1:])
	j.v, err = readSpend(f, field, raw)
	return err
}

// fieldPath returns the dotted path of the member dec is about to read:
// "shadow.account.requests_per_minute" in nested objects.
func fieldPath(dec *jsontext.Decoder) string {
	return strings.Join(slices.Collect(dec.StackPointer().Tokens()), ".")
}

// readLimitValue reads raw, the value of limit f named field (as in
// "limits.cost_per_day"), in an object of limits: null (nil) or, by f's
// row, a decimal string of dollars or an integer from 0 to
// policy.MaxLimit. A wrong integer's error is EINVALID with the message
// intMessage; a wrong spend limit's names field (see readSpend).
func readLimitValue(f *policy.LimitField, field string, raw jsontext.Value, intMessage string) (*int64, error) {
	if f.Kind == policy.KindCost {
		return readSpend(f, field, raw)
	}
	var n *int64
	if json.Unmarshal(raw, &n) != nil || n != nil && (*n < 0 || *n > policy.MaxLimit) {
		return nil, policy.Errorf(policy.EINVALID, "%s", intMessage)
	}
	return n, nil
}

// limitValuesJSON is an object of limits by their names, as a user
// record's and an account's limits are written: in name order, each value
// as limitToken writes it, null for none; a nil map is null.
type limitValuesJSON map[string]*int64

// MarshalJSONTo implements json.MarshalerTo.
func (m limitValuesJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	if m == nil {
		return enc.WriteToken(jsontext.Null)
	}
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		f, ok := policy.LimitFieldNamed(name)
		if !ok {
			continue // cannot happen: the names are LimitFields'
		}
		tok := jsontext.Null
		if v := m[name]; v != nil {
			tok = limitToken(f, *v)
		}
		if err := enc.WriteToken(jsontext.String(name)); err != nil {
			return err
		}
		if err := enc.WriteToken(tok); err != nil {
			return err
		}
	}
	return enc.WriteToken(jsontext.EndObject)
}
