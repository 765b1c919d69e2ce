package policy_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := policy.LoadTimeZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// The boundaries below were worked out by hand from each zone's rules, not
// by the function under test.
func TestBillingPeriod(t *testing.T) {
	for _, c := range []struct {
		name       string
		zone       string
		anchor     int
		t          string
		start, end string
	}{
		// New York: EST -5, EDT -4 from 10 March 2024, 12 March 2023.
		{"NY leap February", "America/New_York", 1, "2024-02-15T12:00:00Z", "2024-02-01T05:00:00Z", "2024-03-01T05:00:00Z"},
		{"NY a period spanning spring forward is an hour short", "America/New_York", 15, "2024-03-01T00:00:00Z", "2024-02-15T05:00:00Z", "2024-03-15T04:00:00Z"},
		{"NY 15 after the change", "America/New_York", 15, "2024-03-20T12:00:00Z", "2024-03-15T04:00:00Z", "2024-04-15T04:00:00Z"},
		{"NY 31 in a non-leap February", "America/New_York", 31, "2023-02-10T00:00:00Z", "2023-01-31T05:00:00Z", "2023-02-28T05:00:00Z"},
		{"NY 31 from 28 February to 31 March", "America/New_York", 31, "2023-03-15T00:00:00Z", "2023-02-28T05:00:00Z", "2023-03-31T04:00:00Z"},
		{"NY 29 non-leap: 28 February, local 23:59:59 before", "America/New_York", 29, "2023-02-28T04:59:59Z", "2023-01-29T05:00:00Z", "2023-02-28T05:00:00Z"},
		{"NY 29 non-leap: 28 February at midnight", "America/New_York", 29, "2023-02-28T05:00:00Z", "2023-02-28T05:00:00Z", "2023-03-29T04:00:00Z"},
		{"NY 29 leap: 29 February", "America/New_York", 29, "2024-02-29T05:00:00Z", "2024-02-29T05:00:00Z", "2024-03-29T04:00:00Z"},
		{"NY 30 leap: 29 February", "America/New_York", 30, "2024-03-01T00:00:00Z", "2024-02-29T05:00:00Z", "2024-03-30T04:00:00Z"},
		{"NY 30 non-leap: 28 February", "America/New_York", 30, "2023-03-01T00:00:00Z", "2023-02-28T05:00:00Z", "2023-03-30T04:00:00Z"},
		{"NY fall back: an hour long", "America/New_York", 1, "2024-11-03T12:00:00Z", "2024-11-01T04:00:00Z", "2024-12-01T05:00:00Z"},
		// Berlin: CET +1, CEST +2 from 31 March 2024 and 30 March 2025 to
		// 27 October 2024.
		{"Berlin 1 across spring forward", "Europe/Berlin", 1, "2024-03-31T12:00:00Z", "2024-02-29T23:00:00Z", "2024-03-31T22:00:00Z"},
		{"Berlin 1 at the end is the next", "Europe/Berlin", 1, "2024-03-31T22:00:00Z", "2024-03-31T22:00:00Z", "2024-04-30T22:00:00Z"},
		{"Berlin 30 non-leap February", "Europe/Berlin", 30, "2025-02-28T23:00:00Z", "2025-02-27T23:00:00Z", "2025-03-29T23:00:00Z"},
		{"Berlin 30 after spring forward", "Europe/Berlin", 30, "2025-04-01T00:00:00Z", "2025-03-29T23:00:00Z", "2025-04-29T22:00:00Z"},
		{"Berlin 15 across fall back", "Europe/Berlin", 15, "2024-10-27T12:00:00Z", "2024-10-14T22:00:00Z", "2024-11-14T23:00:00Z"},
		{"Berlin 29 leap", "Europe/Berlin", 29, "2024-03-10T00:00:00Z", "2024-02-28T23:00:00Z", "2024-03-28T23:00:00Z"},
		// Sydney: AEDT +11 until 7 April 2024 and from 6 October 2024,
		// AEST +10 between; summer is January.
		{"Sydney 1 across fall back (April)", "Australia/Sydney", 1, "2024-04-10T00:00:00Z", "2024-03-31T13:00:00Z", "2024-04-30T14:00:00Z"},
		{"Sydney 1 across spring forward (October)", "Australia/Sydney", 1, "2024-10-10T00:00:00Z", "2024-09-30T14:00:00Z", "2024-10-31T13:00:00Z"},
		{"Sydney 31 leap February", "Australia/Sydney", 31, "2024-02-15T00:00:00Z", "2024-01-30T13:00:00Z", "2024-02-28T13:00:00Z"},
		{"Sydney 29 non-leap", "Australia/Sydney", 29, "2025-03-01T00:00:00Z", "2025-02-27T13:00:00Z", "2025-03-28T13:00:00Z"},
		{"Sydney 15 a local day after UTC's", "Australia/Sydney", 15, "2024-01-14T13:00:00Z", "2024-01-14T13:00:00Z", "2024-02-14T13:00:00Z"},
		// Midnight that does not happen once.
		{"Sao Paulo 2018: midnight skipped, the day starts at 01:00", "America/Sao_Paulo", 4, "2018-11-10T00:00:00Z", "2018-11-04T03:00:00Z", "2018-12-04T02:00:00Z"},
		{"Havana 2023: 01:00 back to 00:00, midnight twice, the first counts", "America/Havana", 5, "2023-11-05T04:30:00Z", "2023-11-05T04:00:00Z", "2023-12-05T05:00:00Z"},
		{"Havana 2023: just before the first midnight", "America/Havana", 5, "2023-11-05T03:59:59Z", "2023-10-05T04:00:00Z", "2023-11-05T04:00:00Z"},
		{"Beirut 2023: 23:59:59 back to 23:00, midnight an hour later", "Asia/Beirut", 29, "2023-10-28T21:30:00Z", "2023-09-28T21:00:00Z", "2023-10-28T22:00:00Z"},
		{"Beirut 2023: the new period at that midnight", "Asia/Beirut", 29, "2023-10-28T22:00:00Z", "2023-10-28T22:00:00Z", "2023-11-28T22:00:00Z"},
		{"Apia 2011: 30 December skipped, the period starts on the 31st", "Pacific/Apia", 30, "2012-01-05T00:00:00Z", "2011-12-30T10:00:00Z", "2012-01-29T10:00:00Z"},
		{"UTC 31 in April", "UTC", 31, "2025-04-30T00:00:00Z", "2025-04-30T00:00:00Z", "2025-05-31T00:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start, end := policy.BillingPeriod(utc(c.t), zone(t, c.zone), c.anchor)
			if !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
				t.Errorf("BillingPeriod(%s, %s, %d) = [%s, %s), want [%s, %s)", c.t, c.zone, c.anchor,
					start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), c.start, c.end)
			}
			if got, want := start.Location().String(), c.zone; got != want {
				t.Errorf("start is in %s, want %s", got, want)
			}
		})
	}
}

func TestBillingPeriodDefaults(t *testing.T) {
	at := utc("2025-06-10T08:00:00Z")
	start, end := policy.BillingPeriod(at, nil, 0) // nil is UTC, 0 is 1
	if !start.Equal(utc("2025-06-01T00:00:00Z")) || !end.Equal(utc("2025-07-01T00:00:00Z")) {
		t.Errorf("nil location, anchor 0: [%s, %s)", start, end)
	}
	start, end = policy.BillingPeriod(at, time.UTC, 40) // 31
	if !start.Equal(utc("2025-05-31T00:00:00Z")) || !end.Equal(utc("2025-06-30T00:00:00Z")) {
		t.Errorf("anchor 40: [%s, %s)", start, end)
	}
	p := policy.BillingCycle{}.Period(at)
	if p.TimeZone != "UTC" || p.Anchor != 1 || !p.Start.Equal(utc("2025-06-01T00:00:00Z")) {
		t.Errorf("zero BillingCycle: %+v", p)
	}
}

// periodZones are zones with transitions away from midnight, where every
// period starts at local 00:00 of its anchor day.
var periodZones = []string{"UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata", "America/St_Johns", "Pacific/Kiritimati", "Pacific/Pago_Pago"}

// checkPeriod checks the invariants of the billing period of t.
func checkPeriod(t *testing.T, at time.Time, loc *time.Location, anchor int, midnight bool) {
	t.Helper()
	start, end := policy.BillingPeriod(at, loc, anchor)
	if at.Before(start) || !at.Before(end) {
		t.Fatalf("%s in %s anchor %d: [%s, %s) does not hold it", at, loc, anchor, start, end)
	}
	if s, e := policy.BillingPeriod(end, loc, anchor); !s.Equal(end) || !e.After(end) {
		t.Fatalf("%s in %s anchor %d: the next period of [%s, %s) is [%s, %s)", at, loc, anchor, start, end, s, e)
	}
	if s, e := policy.BillingPeriod(start, loc, anchor); !s.Equal(start) || !e.Equal(end) {
		t.Fatalf("%s in %s anchor %d: the period of its start %s is [%s, %s)", at, loc, anchor, start, s, e)
	}
	if s, e := policy.BillingPeriod(start.Add(-time.Nanosecond), loc, anchor); !e.Equal(start) || !s.Before(start) {
		t.Fatalf("%s in %s anchor %d: the period before [%s, %s) is [%s, %s)", at, loc, anchor, start, end, s, e)
	}
	sy, sm, sd := start.In(loc).Date()
	ey, em, ed := end.In(loc).Date()
	days := int(time.Date(ey, em, ed, 0, 0, 0, 0, time.UTC).Sub(time.Date(sy, sm, sd, 0, 0, 0, 0, time.UTC)) / (24 * time.Hour))
	if days < 28 || days > 31 {
		t.Fatalf("%s in %s anchor %d: [%s, %s) is %d local days", at, loc, anchor, start, end, days)
	}
	if d := end.Sub(start); d < 28*24*time.Hour-time.Hour || d > 31*24*time.Hour+time.Hour {
		t.Fatalf("%s in %s anchor %d: [%s, %s) lasts %s", at, loc, anchor, start, end, d)
	}
	if !midnight {
		return
	}
	lastDay := time.Date(sy, sm+1, 0, 0, 0, 0, 0, time.UTC).Day()
	if h, m, s := start.In(loc).Clock(); h != 0 || m != 0 || s != 0 || start.Nanosecond() != 0 || sd != min(max(anchor, 1), 31, lastDay) {
		t.Fatalf("%s in %s anchor %d: starts %s, not local midnight of day %d", at, loc, anchor, start.In(loc), min(anchor, lastDay))
	}
}

func TestBillingPeriodProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	lo, hi := utc("1970-01-01T00:00:00Z").UnixNano(), utc("2100-01-01T00:00:00Z").UnixNano()
	for i := range 20000 {
		name := periodZones[i%len(periodZones)]
		at := time.Unix(0, lo+rng.Int64N(hi-lo))
		checkPeriod(t, at, zone(t, name), 1+rng.IntN(31), true)
	}
}

func TestBillingPeriodAroundMonthEnds(t *testing.T) {
	// Every instant a second either side of every local midnight of
	// 2023 and 2024 (a non-leap and a leap year), for anchors 1, 15,
	// 28 to 31.
	for _, name := range []string{"America/New_York", "Europe/Berlin", "Australia/Sydney"} {
		loc := zone(t, name)
		for d := time.Date(2023, 1, 1, 0, 0, 0, 0, loc); d.Year() < 2025; d = d.AddDate(0, 0, 1) {
			for _, anchor := range []int{1, 15, 28, 29, 30, 31} {
				checkPeriod(t, d.Add(-time.Second), loc, anchor, true)
				checkPeriod(t, d, loc, anchor, true)
			}
		}
	}
}

func FuzzBillingPeriod(f *testing.F) {
	f.Add(int64(1709164800), 29, uint8(1))
	f.Add(int64(1698528600), 29, uint8(9))
	f.Add(int64(1699158600), 5, uint8(13))
	f.Add(int64(1325494800), 30, uint8(10))
	f.Add(int64(1541300400), 4, uint8(11))
	zones := append(periodZones[:len(periodZones):len(periodZones)], "Asia/Beirut", "Pacific/Apia", "America/Sao_Paulo", "Africa/Casablanca", "America/Havana")
	f.Fuzz(func(t *testing.T, unix int64, anchor int, z uint8) {
		// 1900 to 2200: beyond, offsets of local mean time and the
		// zone's last rule are all there is to test.
		const from, span = -2208988800, 9467107200
		unix = from + ((unix%span-from)%span+span)%span // unchanged within
		name := zones[int(z)%len(zones)]
		checkPeriod(t, time.Unix(unix, 0), zone(t, name), anchor, int(z)%len(zones) < len(periodZones))
	})
}

func TestLoadTimeZone(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"} {
		loc, err := policy.LoadTimeZone(name)
		if err != nil || loc.String() != name {
			t.Errorf("LoadTimeZone(%q) = %v, %v", name, loc, err)
		}
	}
	for _, name := range []string{"", "Local", "Mars/Base", "europe/berlin", "../../etc/passwd", "/usr/share/zoneinfo/UTC", "Europe/Berlin\x00"} {
		_, err := policy.LoadTimeZone(name)
		if policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("LoadTimeZone(%q): %v, want EINVALID", name, err)
		}
	}
	_, err := policy.LoadTimeZone("Mars/Base")
	if got, want := policy.ErrorMessage(err), `time_zone "Mars/Base" is not a known time zone`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func TestBillingFieldsValidate(t *testing.T) {
	for _, c := range []struct {
		zone   string
		anchor int
		want   string
	}{
		{"", 0, ""},
		{"Europe/Berlin", 31, ""},
		{"Mars/Base", 1, `time_zone "Mars/Base" is not a known time zone`},
		{"UTC", 32, "billing_anchor must be an integer from 1 to 31"},
		{"UTC", -1, "billing_anchor must be an integer from 1 to 31"},
	} {
		r := policy.UserRecord{UserID: "u", TimeZone: c.zone, BillingAnchor: c.anchor}
		a := policy.Account{AccountID: "a", Tier: "team", TimeZone: c.zone, BillingAnchor: c.anchor}
		for what, err := range map[string]error{"record": r.Validate(), "account": a.Validate()} {
			if got := policy.ErrorMessage(err); err == nil && c.want != "" || err != nil && got != c.want {
				t.Errorf("%s with %q, %d: %v, want %q", what, c.zone, c.anchor, err, c.want)
			}
		}
	}
}

func TestUserRecordCycle(t *testing.T) {
	berlin, sydney, ny := zone(t, "Europe/Berlin"), zone(t, "Australia/Sydney"), zone(t, "America/New_York")
	def := policy.BillingCycle{Location: ny, Anchor: 1}
	for _, c := range []struct {
		name       string
		r          *policy.UserRecord
		a          *policy.Account
		wantZone   *time.Location
		wantAnchor int
	}{
		{"no record, no account", nil, nil, ny, 1},
		{"record sets nothing", &policy.UserRecord{}, nil, ny, 1},
		{"record sets both", &policy.UserRecord{TimeZone: "Europe/Berlin", BillingAnchor: 15}, &policy.Account{TimeZone: "Australia/Sydney", BillingAnchor: 31}, berlin, 15},
		{"account's when the record sets none", &policy.UserRecord{}, &policy.Account{TimeZone: "Australia/Sydney", BillingAnchor: 31}, sydney, 31},
		{"each field on its own", &policy.UserRecord{BillingAnchor: 15}, &policy.Account{TimeZone: "Australia/Sydney"}, sydney, 15},
		{"zone from the record, anchor the default", &policy.UserRecord{TimeZone: "Europe/Berlin"}, &policy.Account{}, berlin, 1},
	} {
		got, err := c.r.Cycle(c.a, def)
		if err != nil || got.Location != c.wantZone || got.Anchor != c.wantAnchor {
			t.Errorf("%s: %v %d, %v; want %v %d", c.name, got.Location, got.Anchor, err, c.wantZone, c.wantAnchor)
		}
	}
	a := policy.Account{BillingAnchor: 20}
	if got, err := a.Cycle(def); err != nil || got.Location != ny || got.Anchor != 20 {
		t.Errorf("account cycle: %v %d, %v", got.Location, got.Anchor, err)
	}
	if _, err := (&policy.UserRecord{TimeZone: "Mars/Base"}).Cycle(nil, def); policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("a record with an unknown zone: %v", err)
	}
}

func TestServiceUserPeriod(t *testing.T) {
	clock := policy.NewTestClock(utc("2024-03-31T12:00:00Z"))
	users, accounts := newMemUsers(), accountBook{}
	svc := policy.NewService(newMemStore(), newMemStore(), policy.WithUsers(users), policy.WithAccounts(accounts),
		policy.WithClock(clock.Now), policy.WithTimeZone(zone(t, "Europe/Berlin")))
	p, err := svc.UserPeriod(context.Background(), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p, (policy.Period{Start: utc("2024-02-29T23:00:00Z"), End: utc("2024-03-31T22:00:00Z"), TimeZone: "Europe/Berlin", Anchor: 1}); !samePeriod(got, want) {
		t.Errorf("default: %+v, want %+v", got, want)
	}
	accounts["acme"] = policy.Account{AccountID: "acme", Tier: "team", TimeZone: "Australia/Sydney", BillingAnchor: 15}
	users.records["alice"] = policy.UserRecord{UserID: "alice", Account: "acme", BillingAnchor: 31}
	p, err = svc.UserPeriod(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Sydney, 31 March 2024 23:00 AEDT: the period of the 31st began 23
	// hours ago.
	if got, want := p, (policy.Period{Start: utc("2024-03-30T13:00:00Z"), End: utc("2024-04-29T14:00:00Z"), TimeZone: "Australia/Sydney", Anchor: 31}); !samePeriod(got, want) {
		t.Errorf("alice: %+v, want %+v", got, want)
	}
	a := accounts["acme"]
	p, err = svc.AccountPeriod(&a)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p, (policy.Period{Start: utc("2024-03-14T13:00:00Z"), End: utc("2024-04-14T14:00:00Z"), TimeZone: "Australia/Sydney", Anchor: 15}); !samePeriod(got, want) {
		t.Errorf("acme: %+v, want %+v", got, want)
	}
	if _, err := svc.UserPeriod(context.Background(), "bad\x00id"); policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("a bad user id: %v", err)
	}
}

func samePeriod(a, b policy.Period) bool {
	return a.Start.Equal(b.Start) && a.End.Equal(b.End) && a.TimeZone == b.TimeZone && a.Anchor == b.Anchor
}

func BenchmarkBillingPeriod(b *testing.B) {
	loc := zone(b, "Europe/Berlin")
	at := utc("2025-03-30T12:00:00Z")
	for b.Loop() {
		policy.BillingPeriod(at, loc, 31)
	}
}
