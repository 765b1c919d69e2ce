package policy_test

import (
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

func TestSecretMatches(t *testing.T) {
	for _, tc := range []struct {
		name, secret, got string
		want              bool
	}{
		{"right", "s3cret", "s3cret", true},
		{"wrong", "s3cret", "s3creT", false},
		{"prefix", "s3cret", "s3c", false},
		{"empty guess", "s3cret", "", false},
		{"empty secret, empty guess", "", "", false},
		{"empty secret", "", "anything", false},
	} {
		if got := policy.NewSecret(tc.secret).Matches(tc.got); got != tc.want {
			t.Errorf("%s: NewSecret(%q).Matches(%q) = %v, want %v", tc.name, tc.secret, tc.got, got, tc.want)
		}
	}
	if (policy.Secret{}).Matches("x") {
		t.Error("the zero Secret matched")
	}
}

// TestGateAdmit walks one gate through time: wrong tokens count per
// client until the limit, then every attempt is refused until the oldest
// failure leaves the window, and the right token forgets the failures.
func TestGateAdmit(t *testing.T) {
	t0 := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	g := policy.NewAdminGate("right")
	const a, b = "192.0.2.1", "192.0.2.2"
	steps := []struct {
		at             time.Duration
		client, token  string
		wantOK         bool
		wantRetryAfter int64
	}{
		// No token guesses nothing: refused, never counted.
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "", false, 0},
		{0 * time.Second, a, "wrong", false, 0},
		{1 * time.Second, a, "wrong", false, 0},
		{2 * time.Second, a, "wrong", false, 0},
		{3 * time.Second, a, "wrong", false, 0},
		{4 * time.Second, a, "wrong", false, 0}, // the fifth failure
		{4 * time.Second, a, "", false, 0},      // still refused, still no wait
		// Refused without a look at the token; the first failure leaves
		// the window at 15m, so 15m-5s from here.
		{5 * time.Second, a, "right", false, int64((policy.AdminFailureWindow - 5*time.Second) / time.Second)},
		{5*time.Second + 500*time.Millisecond, a, "right", false, int64((policy.AdminFailureWindow - 5*time.Second) / time.Second)},
		{5 * time.Second, b, "right", true, 0}, // another client is not held up
		{policy.AdminFailureWindow - time.Second, a, "right", false, 1},
		{policy.AdminFailureWindow, a, "right", true, 0},
		// Signed in: the failures are forgotten.
		{policy.AdminFailureWindow + time.Second, a, "wrong", false, 0},
		{policy.AdminFailureWindow + 2*time.Second, a, "right", true, 0},
	}
	for i, s := range steps {
		ok, retryAfter := g.Admit(s.client, s.token, t0.Add(s.at))
		if ok != s.wantOK || retryAfter != s.wantRetryAfter {
			t.Errorf("step %d (%v, %s, %q): Admit = %v, %d; want %v, %d",
				i, s.at, s.client, s.token, ok, retryAfter, s.wantOK, s.wantRetryAfter)
		}
	}
}

// TestGateCountsPerClient counts an IPv4 address on its own and an IPv6
// address with the rest of its /64, which one subscriber usually holds.
func TestGateCountsPerClient(t *testing.T) {
	t0 := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		guesser, then string
		sameClient    bool
	}{
		{"one IPv4 address", "192.0.2.7", "192.0.2.7", true},
		{"its neighbour", "192.0.2.7", "192.0.2.8", false},
		{"one IPv6 /64", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:ffff::1", true},
		{"the next /64", "2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"not an address", "unix-socket", "unix-socket", true},
	} {
		g := policy.NewAdminGate("right")
		for range policy.MaxAdminFailures {
			g.Admit(tc.guesser, "wrong", t0)
		}
		ok, _ := g.Admit(tc.then, "right", t0)
		if ok == tc.sameClient {
			t.Errorf("%s: after %d wrong tokens from %s, the right one from %s admitted: %v, want %v",
				tc.name, policy.MaxAdminFailures, tc.guesser, tc.then, ok, !tc.sameClient)
		}
	}
}

// A gate's fingerprint follows its token, and says nothing of it.
func TestGateFingerprint(t *testing.T) {
	a, b := policy.NewAdminGate("one"), policy.NewAdminGate("two")
	if a.Fingerprint() != policy.NewAdminGate("one").Fingerprint() {
		t.Error("two gates of one token have different fingerprints")
	}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("two tokens have one fingerprint")
	}
}
