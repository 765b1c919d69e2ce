package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/cli"
	"github.com/policyguard/policyguard/api/gateway"
)

// TestFailOpenSetting: -fail-open and GUARDRAIL_FAIL_OPEN reach the server;
// a variable that is not a boolean stops the service.
func TestFailOpenSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"-fail-open"}, nil, true},
		{nil, map[string]string{"GUARDRAIL_FAIL_OPEN": "true"}, true},
		{[]string{"-fail-open=false"}, map[string]string{"GUARDRAIL_FAIL_OPEN": "1"}, false},
		{[]string{"-fail-open=false"}, map[string]string{"GUARDRAIL_FAIL_OPEN": "sometimes"}, false}, // the flag wins
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil || cfg.FailOpen != tc.want {
			t.Errorf("%v %v: fail-open %v (%v), want %v", tc.args, tc.env, cfg.FailOpen, err, tc.want)
		}
	}
	_, err := parseConfig(nil, func(k string) string { return map[string]string{"GUARDRAIL_FAIL_OPEN": "sometimes"}[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `GUARDRAIL_FAIL_OPEN "sometimes": must be true or false`) {
		t.Fatalf("err = %v", err)
	}
}

// A usage message, as a mistyped flag prints it, must not carry the tokens
// set in the environment: it goes to whatever log catches stderr.
func TestUsageMessageHidesTokens(t *testing.T) {
	env := map[string]string{"GUARDRAIL_ADMIN_TOKEN": "admin-secret-77", "GUARDRAIL_API_TOKEN": "api-secret-88",
		"GUARDRAIL_DB": "postgres://guard:db-secret-99@db.internal:5432/guard"}
	getenv := func(k string) string { return env[k] }
	var usage strings.Builder
	if _, err := parseConfig([]string{"-adr", "127.0.0.1:0"}, getenv, &usage); err == nil {
		t.Fatal("a mistyped flag was accepted")
	}
	if !strings.Contains(usage.String(), "-admin-token") {
		t.Fatalf("no usage message:\n%s", usage.String())
	}
	for _, secret := range env {
		if strings.Contains(usage.String(), secret) {
			t.Errorf("the usage message shows %q:\n%s", secret, usage.String())
		}
	}
	cfg, err := parseConfig(nil, getenv, io.Discard)
	if err != nil || cfg.AdminToken != "admin-secret-77" || cfg.APIToken != "api-secret-88" || cfg.DBPath != env["GUARDRAIL_DB"] {
		t.Fatalf("tokens and database from the environment: %q %q %q (%v)", cfg.AdminToken, cfg.APIToken, cfg.DBPath, err)
	}
	cfg, err = parseConfig([]string{"-admin-token", "from-flag"}, getenv, io.Discard)
	if err != nil || cfg.AdminToken != "from-flag" || cfg.APIToken != "api-secret-88" {
		t.Fatalf("a flag must win over its variable: %q %q (%v)", cfg.AdminToken, cfg.APIToken, err)
	}
}

// The PostgreSQL settings have defaults, take flags over variables, and
// refuse what cannot work; only a PostgreSQL database gets them.
func TestPostgresSettings(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseConfig(nil, getenv, io.Discard)
	if err != nil || cfg.DBPath != "guardrail.db" || cfg.PGPoolSize != 16 || cfg.PGStatementTimeout != 5*time.Second || cfg.PGLockTimeout != 5*time.Second {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	if n := len(cfg.storeOptions()); n != 2 {
		t.Fatalf("a SQLite file gets %d options, want 2 (-sync, -time-zone)", n)
	}
	env["GUARDRAIL_PG_POOL_SIZE"], env["GUARDRAIL_PG_LOCK_TIMEOUT"] = "4", "250ms"
	cfg, err = parseConfig([]string{"-db", "postgresql://h/db", "-pg-statement-timeout", "2s", "-pg-pool-size", "9"}, getenv, io.Discard)
	if err != nil || cfg.PGPoolSize != 9 || cfg.PGStatementTimeout != 2*time.Second || cfg.PGLockTimeout != 250*time.Millisecond {
		t.Fatalf("flags over variables: %+v %v", cfg, err)
	}
	if n := len(cfg.storeOptions()); n != 4 {
		t.Fatalf("a PostgreSQL URL gets %d options, want 4", n)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-pg-pool-size", "0"}, "pool size"},
		{[]string{"-pg-pool-size", "many"}, "pool size"},
		{[]string{"-pg-statement-timeout", "0s"}, "statement timeout"},
		{[]string{"-pg-lock-timeout", "soon"}, "lock timeout"},
		{[]string{"-db", ""}, "names no database"},
	} {
		if _, err := parseConfig(tc.args, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %s", tc.args, err, tc.want)
		}
	}
}

// A token no client could send back is refused at start-up, saying why.
func TestTokensMustBeSendable(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"GUARDRAIL_ADMIN_TOKEN": "secret\n"}, "admin token (-admin-token, GUARDRAIL_ADMIN_TOKEN) starts or ends with white space"},
		{[]string{"-api-token", " secret"}, nil, "API token (-api-token, GUARDRAIL_API_TOKEN) starts or ends with white space"},
		{[]string{"-api-token", "sec\x01ret"}, nil, "contains a control character"},
	} {
		_, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: err = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// -trusted-proxies and GUARDRAIL_TRUSTED_PROXIES take addresses and CIDR
// ranges; anything else stops the service, saying which entry is wrong.
func TestTrustedProxiesSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // the ranges, or the error
	}{
		{nil, nil, "[]"},
		{[]string{"-trusted-proxies", "10.0.0.0/8, 192.0.2.1,2001:db8::1"}, nil, "[10.0.0.0/8 192.0.2.1/32 2001:db8::1/128]"},
		{nil, map[string]string{"GUARDRAIL_TRUSTED_PROXIES": "127.0.0.1"}, "[127.0.0.1/32]"},
		{[]string{"-trusted-proxies", ""}, map[string]string{"GUARDRAIL_TRUSTED_PROXIES": "127.0.0.1"}, "[]"}, // the flag wins
		{[]string{"-trusted-proxies", "10.0.0.0/33"}, nil, `trusted proxy "10.0.0.0/33": not an IP address or CIDR range`},
		{nil, map[string]string{"GUARDRAIL_TRUSTED_PROXIES": "proxy.internal"}, `trusted proxy "proxy.internal": not an IP address or CIDR range`},
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		got := fmt.Sprint(cfg.TrustedProxies)
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// -time-zone and GUARDRAIL_TIME_ZONE take an IANA name, UTC when neither
// is set; anything else stops the service.
func TestTimeZoneSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // the zone, or the error
	}{
		{nil, nil, "UTC"},
		{[]string{"-time-zone", "Europe/Berlin"}, nil, "Europe/Berlin"},
		{[]string{"-time-zone", "Asia/Tokyo"}, map[string]string{"GUARDRAIL_TIME_ZONE": "America/New_York"}, "Asia/Tokyo"}, // the flag wins
		{nil, map[string]string{"GUARDRAIL_TIME_ZONE": "America/New_York"}, "America/New_York"},
		{[]string{"-time-zone", "Mars/Base"}, nil, `time zone "Mars/Base": not a known IANA time zone name such as Europe/Berlin or UTC (-time-zone, GUARDRAIL_TIME_ZONE)`},
		{nil, map[string]string{"GUARDRAIL_TIME_ZONE": "Local"}, `time zone "Local": not a known IANA time zone name such as Europe/Berlin or UTC (-time-zone, GUARDRAIL_TIME_ZONE)`},
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		got := fmt.Sprint(cfg.TimeZone)
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// -call-timeout and GUARDRAIL_CALL_TIMEOUT take a positive duration, 10m
// when neither is set; anything else stops the service.
func TestCallTimeoutSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // the timeout, or the error
	}{
		{nil, nil, "10m0s"},
		{[]string{"-call-timeout", "90s"}, nil, "1m30s"},
		{nil, map[string]string{"GUARDRAIL_CALL_TIMEOUT": "1h"}, "1h0m0s"},
		{[]string{"-call-timeout", "2m"}, map[string]string{"GUARDRAIL_CALL_TIMEOUT": "1h"}, "2m0s"}, // the flag wins
		{[]string{"-call-timeout", "0s"}, nil, `call timeout "0s": must be a positive duration`},
		{[]string{"-call-timeout", "-1m"}, nil, `call timeout "-1m": must be a positive duration`},
		{nil, map[string]string{"GUARDRAIL_CALL_TIMEOUT": "ten minutes"}, `call timeout "ten minutes": must be a positive duration`},
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		got := cfg.CallTimeout.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// -run-idle and GUARDRAIL_RUN_IDLE take a positive duration, 1h when
// neither is set, the flag first; anything else stops the service.
func TestRunIdleSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // the idle limit, or the error
	}{
		{nil, nil, "1h0m0s"},
		{[]string{"-run-idle", "30m"}, map[string]string{"GUARDRAIL_RUN_IDLE": "2h"}, "30m0s"},
		{nil, map[string]string{"GUARDRAIL_RUN_IDLE": "2h"}, "2h0m0s"},
		{[]string{"-run-idle", "0s"}, nil, `run idle "0s": must be a positive duration`},
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		got := cfg.RunIdle.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// TestTrustClientTierSetting: -trust-client-tier and
// GUARDRAIL_TRUST_CLIENT_TIER, true unless told otherwise, the flag first.
func TestTrustClientTierSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, true},
		{nil, map[string]string{"GUARDRAIL_TRUST_CLIENT_TIER": "false"}, false},
		{[]string{"-trust-client-tier=false"}, nil, false},
		{[]string{"-trust-client-tier=true"}, map[string]string{"GUARDRAIL_TRUST_CLIENT_TIER": "0"}, true},
	} {
		cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil || cfg.TrustClientTier != tc.want {
			t.Errorf("%v %v: trust %v (%v), want %v", tc.args, tc.env, cfg.TrustClientTier, err, tc.want)
		}
	}
	_, err := parseConfig(nil, func(k string) string { return map[string]string{"GUARDRAIL_TRUST_CLIENT_TIER": "maybe"}[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `GUARDRAIL_TRUST_CLIENT_TIER "maybe": must be true or false`) {
		t.Errorf("bad value: %v", err)
	}
}

// -h lists the commands beside the service's flags.
func TestUsageListsCommands(t *testing.T) {
	var out strings.Builder
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	commands, flags, ok := strings.Cut(out.String(), "\nFlags:\n")
	if !ok || !strings.Contains(commands, "\nCommands:\n  tiers export|import ...") || !strings.Contains(flags, "-addr") {
		t.Fatalf("usage:\n%s", out.String())
	}
}

// The README's Configuration table and the settings table in code list the
// same flags, each with the same variable and, where the README gives one
// value, the same default: a flag the README lacks, or a README row with no
// flag, fails.
func TestREADMEConfigurationTable(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Configuration\n")
	section, _, _ = strings.Cut(section, "\n## ")
	code := map[string]cli.Setting{}
	for _, s := range settings(&config{}, &gateway.Config{}, func(string) string { return "" }) {
		code["-"+s.Flag] = s
	}
	quoted := regexp.MustCompile("`([^`]*)`")
	inREADME := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`-") {
			continue
		}
		var vars []string
		for _, m := range quoted.FindAllStringSubmatch(cells[2], -1) {
			vars = append(vars, m[1])
		}
		flags := quoted.FindAllStringSubmatch(cells[1], -1)
		for i, m := range flags {
			flag := m[1]
			inREADME[flag] = true
			s, ok := code[flag]
			if !ok {
				t.Errorf("the README lists %s, which is no setting", flag)
				continue
			}
			if i >= len(vars) || vars[i] != s.Env {
				t.Errorf("the README gives %s the variables %v, want %s", flag, vars, s.Env)
			}
			if def := quoted.FindAllStringSubmatch(cells[3], -1); len(flags) == 1 && len(def) == 1 && !sameValue(def[0][1], s.Default) {
				t.Errorf("the README gives %s the default %q, the code %q", flag, def[0][1], s.Default)
			}
		}
	}
	if len(inREADME) == 0 {
		t.Fatal("no Configuration table in the README")
	}
	for flag := range code {
		if !inREADME[flag] {
			t.Errorf("the README's Configuration table lacks %s", flag)
		}
	}
}

// sameValue reports whether a and b are the same value: equal, or the same
// duration written two ways (10m, 10m0s).
func sameValue(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return a == b || errA == nil && errB == nil && da == db
}

// The service's -time-zone is the zone of the billing period of a user
// who sets none, and of the import that names one.
func TestTimeZoneReachesTheService(t *testing.T) {
	url, _ := startWithEnv(t, map[string]string{"GUARDRAIL_TIME_ZONE": "Asia/Tokyo"})
	if b := mustCall(t, "GET", url+"/v1/usage/ann", "", 200); !strings.Contains(b, `"time_zone":"Asia/Tokyo","billing_anchor":1}`) ||
		!strings.Contains(b, `"start":"`) || !strings.Contains(b, `T00:00:00+09:00"`) {
		t.Errorf("usage: %s, want a period in Asia/Tokyo", b)
	}
}
