package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// How a limit's value is written for people and read from them, decided
// here by its row's Kind: a spend limit (KindCost) is Money, shown in US
// dollars with at least two decimals ("$20.50", exact below a cent:
// "$0.000001"); every other limit is a count. The JSON API writes a spend
// limit as Money.String ("20.5") instead, as every amount on the wire.

// Format returns v, a value of f, as a message shows it: "$20.50" for a
// spend limit, the integer ("1000") otherwise.
func (f *LimitField) Format(v int64) string {
	if f.Kind == KindCost {
		return DollarText(Money(v))
	}
	return strconv.FormatInt(v, 10)
}

// Text returns v, a value of f, as the wording of a limit shows it: "none"
// when nil, "$20.50" for a spend limit, else the integer with its digits
// grouped ("1,000").
func (f *LimitField) Text(v *int64) string {
	switch {
	case v == nil:
		return "none"
	case f.Kind == KindCost:
		return DollarText(Money(*v))
	}
	return GroupDigits(*v)
}

// DollarText returns m as people read an amount of dollars: "$20.00",
// "$0.15", "$0.000001", "-$1.50": the exact amount, with at least the
// cents. ParseDollars reads it back to m.
func DollarText(m Money) string {
	s := m.String()
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + "$" + whole + "." + frac
}

// ParseDollars reads an amount of dollars as a person types it: as
// ParseMoney reads it, with an optional leading '$' ("$20", "20.00",
// "0.15"). Its errors are ParseMoney's.
func ParseDollars(s string) (Money, error) {
	return ParseMoney(strings.TrimPrefix(s, "$"))
}

// Parse reads a value of f typed by a person, as the admin page's forms
// send it: a spend limit in dollars (see ParseDollars), any other an
// integer. field names it in the errors, which are EINVALID and say the
// range (see InRange).
func (f *LimitField) Parse(field, value string) (int64, error) {
	if value == "" {
		return 0, Errorf(EINVALID, "%s is required", field)
	}
	if f.Kind == KindCost {
		return f.ParseAmount(field, strings.TrimPrefix(value, "$"), f.MoneyMessage(field))
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil || !f.InRange(v) {
		return 0, Errorf(EINVALID, "%s", f.rangeMessage(field))
	}
	return v, nil
}

// ParseAmount reads s, a value of spend limit f named field, as ParseMoney
// reads an amount (the wire's decimal strings: "20", "0.15"). Its errors
// are EINVALID: notAmount when s is not written as an amount at all,
// ParseMoney's reason, after field, when it is finer than a picodollar or
// larger than MaxMoney, and the range of f when it is negative.
func (f *LimitField) ParseAmount(field, s, notAmount string) (int64, error) {
	if !moneySyntax(s) {
		return 0, Errorf(EINVALID, "%s", notAmount)
	}
	m, err := ParseMoney(s)
	switch {
	case err != nil:
		return 0, Errorf(EINVALID, "%s: %s", field, ErrorMessage(err))
	case !f.InRange(int64(m)):
		return 0, Errorf(EINVALID, "%s", f.rangeMessage(field))
	}
	return int64(m), nil
}

// MoneyMessage is the message of a value of f, a spend limit named field,
// that is not an amount of dollars at all.
func (f *LimitField) MoneyMessage(field string) string {
	return fmt.Sprintf("%s must be a dollar amount such as \"20\" or \"0.15\"", field)
}
