package policy

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Money is an amount of US dollars counted in picodollars (1e-12 USD), the
// one unit of money in the service. It is an integer so that sums are
// exact: no floating point ever touches an amount.
//
// Why picodollars: the unit must be fine enough that one token of the
// cheapest model is not rounded away. Prices are quoted per million
// tokens, so a price with six decimals ($0.000001 per million tokens) is
// one picodollar per million tokens, and any price written to the
// picodollar is exactly representable; one token of a model at $0.01 per
// million costs 10,000 units, not zero. An int64 of picodollars holds up
// to about $9.2 million (MaxMoney), ample for a user's spend over any
// window the service keeps.
//
// The zero value is $0.
type Money int64

// MaxMoney is the largest amount a Money holds: $9,223,372.036854775807.
const MaxMoney = Money(math.MaxInt64)

// Picodollars per dollar.
const moneyScale = 1_000_000_000_000

// moneyDecimals is how many decimals of a dollar a Money keeps.
const moneyDecimals = 12

// Dollars returns n whole dollars as Money; ok is false when the amount
// does not fit.
func Dollars(n int64) (m Money, ok bool) {
	if n > int64(MaxMoney)/moneyScale || n < -int64(MaxMoney)/moneyScale {
		return 0, false
	}
	return Money(n * moneyScale), true
}

// ParseMoney reads a decimal amount of dollars such as "20", "0.15" or
// "0.000001", exactly. It accepts an optional leading '-', digits, and an
// optional '.' followed by at least one digit; no exponent, sign '+',
// spaces or thousands separators. Digits beyond the twelfth decimal must
// be zeros (the unit is a picodollar), and the amount must fit MaxMoney.
// Its errors are EINVALID and say which of these the text broke.
func ParseMoney(s string) (Money, error) {
	orig := s
	if !moneySyntax(s) {
		return 0, Errorf(EINVALID, "%s is not a decimal amount of dollars such as \"0.15\"", Quote(orig))
	}
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > moneyDecimals {
		if strings.Trim(frac[moneyDecimals:], "0") != "" {
			return 0, Errorf(EINVALID, "%s is finer than a picodollar (at most %d decimals)", Quote(orig), moneyDecimals)
		}
		frac = frac[:moneyDecimals]
	}
	overflow := Errorf(EINVALID, "%s is more than the largest amount, %s", Quote(orig), MaxMoney)
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 7 { // MaxMoney has 7 whole digits
		return 0, overflow
	}
	w, _ := strconv.ParseUint("0"+whole, 10, 64)
	f, _ := strconv.ParseUint(frac+strings.Repeat("0", moneyDecimals-len(frac)), 10, 64)
	v := w*moneyScale + f // at most 9,999,999e12 + 1e12: fits a uint64
	if v > uint64(MaxMoney) {
		return 0, overflow
	}
	if neg {
		return Money(-int64(v)), nil
	}
	return Money(v), nil
}

// moneySyntax reports whether s is written as ParseMoney reads an amount,
// whatever its size.
func moneySyntax(s string) bool {
	whole, frac, dot := strings.Cut(strings.TrimPrefix(s, "-"), ".")
	return whole != "" && (!dot || frac != "") && allDigits(whole) && allDigits(frac)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns m in dollars as the shortest exact decimal: "20",
// "0.15", "0.000001", "-1.5". ParseMoney reads it back to m.
func (m Money) String() string { return string(m.Append(nil)) }

// Append appends m as String writes it to b and returns the extended
// buffer. It allocates nothing when b has room, so an answer written by
// hand on the check's path can carry amounts.
func (m Money) Append(b []byte) []byte {
	u := uint64(m)
	if m < 0 {
		b = append(b, '-')
		u = -u // two's complement: right for math.MinInt64 too
	}
	b = strconv.AppendUint(b, u/moneyScale, 10)
	if f := u % moneyScale; f != 0 {
		var frac [moneyDecimals]byte // zero-padded to 12
		for i := len(frac) - 1; i >= 0; i-- {
			frac[i] = byte('0' + f%10)
			f /= 10
		}
		n := len(frac)
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, frac[:n]...)
	}
	return b
}

// Add returns m+n; ok is false, and the sum meaningless, when it
// overflows.
func (m Money) Add(n Money) (sum Money, ok bool) {
	s := m + n
	// Overflow happened iff both operands have the same sign and the sum's
	// sign differs.
	if (m >= 0) == (n >= 0) && (s >= 0) != (m >= 0) {
		return 0, false
	}
	return s, true
}

// Sub returns m-n; ok is false, and the difference meaningless, when it
// overflows.
func (m Money) Sub(n Money) (diff Money, ok bool) {
	if n == math.MinInt64 {
		if m >= 0 {
			return 0, false
		}
		return m - n, true
	}
	return m.Add(-n)
}

// perMillion is the number of tokens a price is quoted for.
const perMillion = 1_000_000

// CostOf returns the cost of tokens at price per million tokens, rounded
// up to the picodollar; ok is false when it exceeds MaxMoney. Both must
// not be negative.
func CostOf(tokens int64, price Money) (cost Money, ok bool) {
	return costSum([]int64{tokens}, []Money{price})
}

// costSum returns the sum of tokens[i]*prices[i] per million tokens, each
// product exact in 128 bits and the sum rounded up once, so that a call's
// parts are not each rounded. ok is false when the sum exceeds MaxMoney or
// an operand is negative.
func costSum(tokens []int64, prices []Money) (Money, bool) {
	var hi, lo uint64
	for i := range tokens {
		if tokens[i] < 0 || prices[i] < 0 {
			return 0, false
		}
		h, l := bits.Mul64(uint64(tokens[i]), uint64(prices[i]))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi, c = bits.Add64(hi, h, c)
		if c != 0 {
			return 0, false
		}
	}
	// Round up: add perMillion-1 before dividing.
	if hi >= perMillion {
		return 0, false // the quotient needs more than 64 bits
	}
	var c uint64
	lo, c = bits.Add64(lo, perMillion-1, 0)
	if hi += c; hi >= perMillion {
		return 0, false // the quotient needs more than 64 bits
	}
	q, _ := bits.Div64(hi, lo, perMillion)
	if q > uint64(MaxMoney) {
		return 0, false
	}
	return Money(q), true
}
