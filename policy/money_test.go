package policy_test

import (
	"math"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestParseMoney(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want policy.Money
		str  string // String of the result; "" means in
	}{
		{"0", 0, ""},
		{"20", 20_000_000_000_000, ""},
		{"0.15", 150_000_000_000, ""},
		{"0.000001", 1_000_000, ""},
		{"0.000000000001", 1, ""},
		{"1.500", 1_500_000_000_000, "1.5"},
		{"0.0000000000010000", 1, "0.000000000001"},
		{"007.25", 7_250_000_000_000, "7.25"},
		{"-1.5", -1_500_000_000_000, ""},
		{"9223372.036854775807", policy.MaxMoney, ""},
		{"-9223372.036854775807", -policy.MaxMoney, ""},
	} {
		got, err := policy.ParseMoney(tt.in)
		if err != nil {
			t.Errorf("ParseMoney(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseMoney(%q) = %d, want %d", tt.in, int64(got), int64(tt.want))
		}
		want := tt.str
		if want == "" {
			want = tt.in
		}
		if s := got.String(); s != want {
			t.Errorf("ParseMoney(%q).String() = %q, want %q", tt.in, s, want)
		}
	}
}

func TestParseMoneyRefuses(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "not a decimal amount"},
		{".5", "not a decimal amount"},
		{"1.", "not a decimal amount"},
		{"+1", "not a decimal amount"},
		{"1e-6", "not a decimal amount"},
		{"1,000", "not a decimal amount"},
		{" 1", "not a decimal amount"},
		{"--1", "not a decimal amount"},
		{"0x10", "not a decimal amount"},
		{"0.0000000000001", "finer than a picodollar"},
		{"1.0000000000005", "finer than a picodollar"},
		{"9223372.036854775808", "more than the largest amount"},
		{"10000000", "more than the largest amount"},
		{"99999999999999999999999", "more than the largest amount"},
	} {
		_, err := policy.ParseMoney(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("ParseMoney(%q) = %v, want an EINVALID error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestMoneyString(t *testing.T) {
	for _, tt := range []struct {
		m    policy.Money
		want string
	}{
		{0, "0"},
		{1, "0.000000000001"},
		{-1, "-0.000000000001"},
		{policy.Money(math.MinInt64), "-9223372.036854775808"},
		{120_000_000_000, "0.12"},
	} {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("Money(%d).String() = %q, want %q", int64(tt.m), got, tt.want)
		}
		if got := string(tt.m.Append([]byte("$"))); got != "$"+tt.want {
			t.Errorf("Money(%d).Append($) = %q, want %q", int64(tt.m), got, "$"+tt.want)
		}
	}
	buf := make([]byte, 0, 32)
	if n := testing.AllocsPerRun(100, func() { buf = policy.Money(-1).Append(buf[:0]) }); n != 0 {
		t.Errorf("Append into a buffer with room allocates %v times", n)
	}
}

func TestMoneyArithmetic(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  policy.Money // add's result: 0 on overflow
		want policy.Money
	}{
		{"add", add(1, 2), 3},
		{"add at max", add(policy.MaxMoney-1, 1), policy.MaxMoney},
		{"add over max", add(policy.MaxMoney, 1), 0},
		{"add under min", add(math.MinInt64, -1), 0},
		{"add mixed signs", add(policy.MaxMoney, math.MinInt64), -1},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, int64(tt.got), int64(tt.want))
		}
	}
	if _, ok := policy.MaxMoney.Add(1); ok {
		t.Error("MaxMoney.Add(1) reported no overflow")
	}
	if _, ok := policy.Money(0).Sub(math.MinInt64); ok {
		t.Error("0 - MinInt64 reported no overflow")
	}
	if d, ok := policy.Money(-1).Sub(math.MinInt64); !ok || d != policy.MaxMoney {
		t.Errorf("-1 - MinInt64 = %d, %v; want MaxMoney, true", int64(d), ok)
	}
	if d, ok := policy.Money(5).Sub(7); !ok || d != -2 {
		t.Errorf("5 - 7 = %d, %v", int64(d), ok)
	}
	if m, ok := policy.Dollars(20); !ok || m.String() != "20" {
		t.Errorf("Dollars(20) = %v, %v", m, ok)
	}
	if _, ok := policy.Dollars(10_000_000); ok {
		t.Error("Dollars(10,000,000) fit a Money")
	}
}

func add(a, b policy.Money) policy.Money {
	s, ok := a.Add(b)
	if !ok {
		return 0
	}
	return s
}

func TestCostOf(t *testing.T) {
	p := func(s string) policy.Money {
		m, err := policy.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tt := range []struct {
		tokens int64
		price  string
		want   string
		ok     bool
	}{
		{1, "0.15", "0.00000015", true},
		{1_000_000, "0.15", "0.15", true},
		{1, "0.01", "0.00000001", true},
		// One token at the finest price: a millionth of a picodollar,
		// rounded up to one, never to zero.
		{1, "0.000000000001", "0.000000000001", true},
		{0, "75", "0", true},
		// 100 billion tokens at $75 per million: the product overflows 64
		// bits, the cost does not.
		{100_000_000_000, "75", "7500000", true},
		{1_000_000_000_000, "75", "", false},
		{-1, "1", "", false},
	} {
		got, ok := policy.CostOf(tt.tokens, p(tt.price))
		if ok != tt.ok || (ok && got.String() != tt.want) {
			t.Errorf("CostOf(%d, %s) = %s, %v; want %s, %v", tt.tokens, tt.price, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzMoney checks that every Money prints as text ParseMoney reads back to
// it, and that every text ParseMoney accepts prints as the same amount.
func FuzzMoney(f *testing.F) {
	for _, s := range []string{"0", "0.15", "20", "0.000001", "-3.25", "9223372.036854775807", "1.000", "abc"} {
		f.Add(s, int64(len(s))*7919)
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		m := policy.Money(n)
		back, err := policy.ParseMoney(m.String())
		if n == math.MinInt64 {
			if err == nil {
				t.Fatalf("ParseMoney(%q) accepted an amount below -MaxMoney", m.String())
			}
		} else if err != nil || back != m {
			t.Fatalf("ParseMoney(Money(%d).String() = %q) = %d, %v", n, m.String(), int64(back), err)
		}
		if v, err := policy.ParseMoney(s); err == nil {
			again, err := policy.ParseMoney(v.String())
			if err != nil || again != v {
				t.Fatalf("%q read as %d, printed %q, read back %d, %v", s, int64(v), v.String(), int64(again), err)
			}
			if strings.Count(v.String(), ".") > 1 || strings.HasSuffix(v.String(), "0") && strings.Contains(v.String(), ".") {
				t.Fatalf("%q printed as %q: not the shortest form", s, v.String())
			}
		}
	})
}
