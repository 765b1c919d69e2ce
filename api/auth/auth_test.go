package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api/auth"
)

func TestTokenMatches(t *testing.T) {
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
		if got := auth.NewToken(tc.secret).Matches(tc.got); got != tc.want {
			t.Errorf("%s: NewToken(%q).Matches(%q) = %v, want %v", tc.name, tc.secret, tc.got, got, tc.want)
		}
	}
	if (auth.Token{}).Matches("x") {
		t.Error("the zero Token matched")
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"Bearer abc", "abc"},
		{"bearer  abc\t", "abc"},
		{"Basic abc", ""},
		{"Bearer", ""},
		{"", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		if got := auth.BearerToken(r); got != tc.want {
			t.Errorf("BearerToken(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

// TestGateAdmit walks one gate through time: wrong tokens count per
// client until the limit, then every attempt is refused until the oldest
// failure leaves the window, and the right token forgets the failures.
func TestGateAdmit(t *testing.T) {
	t0 := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	g := auth.NewGate("right")
	const a, b = "192.0.2.1", "192.0.2.2"
	steps := []struct {
		at             time.Duration
		client, token  string
		wantOK         bool
		wantRetryAfter int64
	}{
		{0 * time.Second, a, "wrong", false, 0},
		{1 * time.Second, a, "wrong", false, 0},
		{2 * time.Second, a, "wrong", false, 0},
		{3 * time.Second, a, "wrong", false, 0},
		{4 * time.Second, a, "", false, 0}, // the fifth failure
		// Refused without a look at the token; the first failure leaves
		// the window at 15m, so 15m-5s from here.
		{5 * time.Second, a, "right", false, int64((auth.Window - 5*time.Second) / time.Second)},
		{5*time.Second + 500*time.Millisecond, a, "right", false, int64((auth.Window - 5*time.Second) / time.Second)},
		{5 * time.Second, b, "right", true, 0}, // another client is not held up
		{auth.Window - time.Second, a, "right", false, 1},
		{auth.Window, a, "right", true, 0},
		// Signed in: the failures are forgotten.
		{auth.Window + time.Second, a, "wrong", false, 0},
		{auth.Window + 2*time.Second, a, "right", true, 0},
	}
	for i, s := range steps {
		ok, retryAfter := g.Admit(s.client, s.token, t0.Add(s.at))
		if ok != s.wantOK || retryAfter != s.wantRetryAfter {
			t.Errorf("step %d (%v, %s, %q): Admit = %v, %d; want %v, %d",
				i, s.at, s.client, s.token, ok, retryAfter, s.wantOK, s.wantRetryAfter)
		}
	}
}

func TestClient(t *testing.T) {
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect()
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.7:1234", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:1234", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:1", "2001:db8:1:2::/64"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if got := auth.Client(e.NewContext(r, httptest.NewRecorder())); got != tc.want {
			t.Errorf("Client from %s = %q, want %q", tc.remote, got, tc.want)
		}
	}
}
