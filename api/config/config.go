// Package config reads the settings of the policyguard service: flags over
// environment variables over defaults, each checked before the service
// starts, so that a mistake stops it at once and says what is wrong.
package config

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// Config is the service's configuration.
type Config struct {
	Addr string
	// DBPath is the database: a SQLite file, or a postgres:// URL.
	DBPath          string
	AdminToken      string // empty: the service generates one
	DefaultTier     string
	CleanupInterval time.Duration
	Sync            string
	LogFormat       string // text or json
	MetricsAddr     string // empty: metrics are served on Addr
	FailOpen        bool
	// TrustClientTier believes a check's context.user_tier for a user
	// without an assigned tier; false decides it under the default tier.
	TrustClientTier bool
	APIToken        string // empty: checks need no token
	TLSCert         string // empty: plain HTTP
	TLSKey          string
	TrustedProxies  []*net.IPNet
	// TestClock runs the service on a clock that moves only when told
	// (POST /v1/test/clock); loopback addresses only.
	TestClock bool
	// CallTimeout is how long a metered call stays open without a finish
	// or keepalive before the service finishes it with its reservation.
	CallTimeout time.Duration
	// PostgreSQL's connection pool size, statement timeout and lock wait;
	// SQLite ignores them.
	PGPoolSize         int
	PGStatementTimeout time.Duration
	PGLockTimeout      time.Duration
}

// StoreOptions returns the options of db.Open for the configured database.
func (cfg Config) StoreOptions() []db.Option {
	if db.IsPostgres(cfg.DBPath) {
		return []db.Option{db.WithPoolSize(cfg.PGPoolSize), db.WithStatementTimeout(cfg.PGStatementTimeout),
			db.WithBusyTimeout(cfg.PGLockTimeout)}
	}
	return []db.Option{db.WithSynchronous(cfg.Sync)}
}

// withDefaults returns a lookup through getenv that gives def for a
// variable that is unset or empty.
func withDefaults(getenv func(string) string) func(key, def string) string {
	return func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
}

// DBPath returns the database used where -db names none: GUARDRAIL_DB, or
// the SQLite file guardrail.db. The tiers commands share it with the
// service.
func DBPath(getenv func(string) string) string {
	return withDefaults(getenv)("GUARDRAIL_DB", "guardrail.db")
}

// DBUsage describes -db, for the service and the tiers commands.
const DBUsage = "database: a SQLite file, created if missing, or a PostgreSQL URL (postgres://user:password@host:5432/name) (GUARDRAIL_DB, default guardrail.db)"

// DefaultPGLockTimeout is how long a check waits for its user's lock on
// PostgreSQL by default.
const DefaultPGLockTimeout = 5 * time.Second

// DefaultTier returns the default tier used where -default-tier names none:
// GUARDRAIL_DEFAULT_TIER, or policy.DefaultTierName. The tiers commands
// share it with the service.
func DefaultTier(getenv func(string) string) string {
	return withDefaults(getenv)("GUARDRAIL_DEFAULT_TIER", policy.DefaultTierName)
}

// usage opens the usage message, before the flags: how the program is run,
// and the commands main runs instead of the service, one a line.
const usage = `Usage:
  policyguard [flags]            run the service
  policyguard COMMAND [args]     run a command and exit

Commands:
  tiers export|import ...
    	write the tiers and user records as a tiers file, or apply one (policyguard tiers -h tells more)

Flags:`

// Parse reads the service's flags from args, and the environment through
// getenv. Usage messages go to stderr; -h returns flag.ErrHelp.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	env := withDefaults(getenv)
	var cfg Config
	fs := flag.NewFlagSet("policyguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Addr, "addr", env("GUARDRAIL_ADDR", "127.0.0.1:8080"), "listen address (GUARDRAIL_ADDR)")
	// Secrets and booleans take their variables after parsing, not as flag
	// defaults: a usage message (-h, a mistyped flag) prints every default,
	// and would print the tokens, or a database URL's password, into
	// whatever log catches stderr.
	fs.StringVar(&cfg.DBPath, "db", "", DBUsage)
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "bearer token for the admin API; empty generates one and prints it (GUARDRAIL_ADMIN_TOKEN)")
	fs.StringVar(&cfg.DefaultTier, "default-tier", DefaultTier(getenv), "tier of requests that name none (GUARDRAIL_DEFAULT_TIER)")
	fs.StringVar(&cfg.Sync, "sync", env("GUARDRAIL_SYNC", db.SyncFull), "SQLite synchronous mode: FULL survives power loss, NORMAL only a process crash (GUARDRAIL_SYNC)")
	fs.StringVar(&cfg.LogFormat, "log-format", env("GUARDRAIL_LOG_FORMAT", "text"), "log format: text or json (GUARDRAIL_LOG_FORMAT)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", env("GUARDRAIL_METRICS_ADDR", ""), "serve GET /metrics on this address instead of the API's (GUARDRAIL_METRICS_ADDR)")
	fs.BoolVar(&cfg.FailOpen, "fail-open", false, "admit checks when storage fails instead of refusing them with 503; each is counted and logged (GUARDRAIL_FAIL_OPEN)")
	fs.BoolVar(&cfg.TrustClientTier, "trust-client-tier", true, "decide a check under the context.user_tier it names when its user has no assigned tier; false uses the default tier (GUARDRAIL_TRUST_CLIENT_TIER)")
	fs.StringVar(&cfg.APIToken, "api-token", "", "bearer token every POST /v1/check and call route (/v1/calls/...) must carry; empty leaves them open (GUARDRAIL_API_TOKEN)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", env("GUARDRAIL_TLS_CERT", ""), "serve HTTPS with this PEM certificate (chain); needs -tls-key (GUARDRAIL_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", env("GUARDRAIL_TLS_KEY", ""), "PEM private key of -tls-cert (GUARDRAIL_TLS_KEY)")
	fs.BoolVar(&cfg.TestClock, "test-clock", false, "for tests: run on a clock that moves only through POST /v1/test/clock; loopback addresses only (GUARDRAIL_TEST_CLOCK)")
	proxies := env("GUARDRAIL_TRUSTED_PROXIES", "")
	fs.Func("trusted-proxies", "comma-separated addresses or CIDR ranges of reverse proxies whose X-Forwarded-For names the client (GUARDRAIL_TRUSTED_PROXIES, default none)", func(s string) error {
		proxies = s
		return nil
	})
	interval := env("GUARDRAIL_CLEANUP_INTERVAL", "1m")
	fs.Func("cleanup-interval", "how often rows older than 25 hours (a day and an hour's slack for clock steps) are deleted (GUARDRAIL_CLEANUP_INTERVAL, default 1m)", func(s string) error {
		interval = s
		return nil
	})
	callTimeout := env("GUARDRAIL_CALL_TIMEOUT", policy.DefaultCallTimeout.String())
	fs.Func("call-timeout", "how long a metered call stays open without a finish or keepalive before the service finishes it with its reserved tokens (GUARDRAIL_CALL_TIMEOUT, default 10m)", func(s string) error {
		callTimeout = s
		return nil
	})
	poolSize := env("GUARDRAIL_PG_POOL_SIZE", strconv.Itoa(db.DefaultPoolSize))
	fs.Func("pg-pool-size", fmt.Sprintf("PostgreSQL only: connections the service opens at most; each check holds one while it records (GUARDRAIL_PG_POOL_SIZE, default %d)", db.DefaultPoolSize), func(s string) error {
		poolSize = s
		return nil
	})
	stmtTimeout := env("GUARDRAIL_PG_STATEMENT_TIMEOUT", db.DefaultStatementTimeout.String())
	fs.Func("pg-statement-timeout", fmt.Sprintf("PostgreSQL only: how long one statement may run before it fails, and its check with 503 (GUARDRAIL_PG_STATEMENT_TIMEOUT, default %v)", db.DefaultStatementTimeout), func(s string) error {
		stmtTimeout = s
		return nil
	})
	lockTimeout := env("GUARDRAIL_PG_LOCK_TIMEOUT", DefaultPGLockTimeout.String())
	fs.Func("pg-lock-timeout", fmt.Sprintf("PostgreSQL only: how long a check waits for the lock of its user, which another replica's check of the same user holds, before it fails with 503 (GUARDRAIL_PG_LOCK_TIMEOUT, default %v)", DefaultPGLockTimeout), func(s string) error {
		lockTimeout = s
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["db"] {
		cfg.DBPath = DBPath(getenv)
	}
	if cfg.DBPath == "" {
		return cfg, errors.New("-db names no database")
	}
	if n, err := strconv.Atoi(poolSize); err != nil || n < 1 {
		return cfg, fmt.Errorf("pool size %q: must be a whole number of at least 1 (-pg-pool-size, GUARDRAIL_PG_POOL_SIZE)", poolSize)
	} else {
		cfg.PGPoolSize = n
	}
	for _, d := range []struct {
		name, flag, value string
		to                *time.Duration
	}{
		{"statement timeout", "-pg-statement-timeout, GUARDRAIL_PG_STATEMENT_TIMEOUT", stmtTimeout, &cfg.PGStatementTimeout},
		{"lock timeout", "-pg-lock-timeout, GUARDRAIL_PG_LOCK_TIMEOUT", lockTimeout, &cfg.PGLockTimeout},
	} {
		v, err := time.ParseDuration(d.value)
		if err != nil || v < time.Millisecond {
			return cfg, fmt.Errorf("%s %q: must be a duration of at least 1ms such as 5s or 500ms (%s)", d.name, d.value, d.flag)
		}
		*d.to = v
	}
	if !set["admin-token"] {
		cfg.AdminToken = getenv("GUARDRAIL_ADMIN_TOKEN")
	}
	if !set["api-token"] {
		cfg.APIToken = getenv("GUARDRAIL_API_TOKEN")
	}
	if v := getenv("GUARDRAIL_FAIL_OPEN"); v != "" && !set["fail-open"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_FAIL_OPEN %q: must be true or false", v)
		}
		cfg.FailOpen = b
	}
	if v := getenv("GUARDRAIL_TRUST_CLIENT_TIER"); v != "" && !set["trust-client-tier"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_TRUST_CLIENT_TIER %q: must be true or false", v)
		}
		cfg.TrustClientTier = b
	}
	if v := getenv("GUARDRAIL_TEST_CLOCK"); v != "" && !set["test-clock"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_TEST_CLOCK %q: must be true or false", v)
		}
		cfg.TestClock = b
	}
	if cfg.TestClock {
		if err := api.CheckTestClockAddr(cfg.Addr); err != nil {
			return cfg, err
		}
	}
	for _, tok := range []struct{ name, value string }{
		{"admin token (-admin-token, GUARDRAIL_ADMIN_TOKEN)", cfg.AdminToken},
		{"API token (-api-token, GUARDRAIL_API_TOKEN)", cfg.APIToken},
	} {
		if err := checkToken(tok.value); err != nil {
			return cfg, fmt.Errorf("%s %w", tok.name, err)
		}
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d <= 0 {
		return cfg, fmt.Errorf("cleanup interval %q: must be a positive duration such as 1m or 30s", interval)
	}
	cfg.CleanupInterval = d
	if cfg.CallTimeout, err = time.ParseDuration(callTimeout); err != nil || cfg.CallTimeout <= 0 {
		return cfg, fmt.Errorf("call timeout %q: must be a positive duration such as 10m or 90s (-call-timeout, GUARDRAIL_CALL_TIMEOUT)", callTimeout)
	}
	if cfg.TrustedProxies, err = parseProxies(proxies); err != nil {
		return cfg, err
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return cfg, fmt.Errorf("log format %q: must be text or json", cfg.LogFormat)
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, errors.New("TLS needs both -tls-cert and -tls-key (GUARDRAIL_TLS_CERT, GUARDRAIL_TLS_KEY)")
	}
	return cfg, nil
}

// parseProxies reads a comma-separated list of addresses and CIDR ranges.
func parseProxies(list string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			ip := net.ParseIP(item)
			if ip == nil {
				return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
			}
			bits := 128
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 32
			}
			nets = append(nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(item)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
		}
		nets = append(nets, n)
	}
	return nets, nil
}

// checkToken refuses a token no client could send back: a bearer token is
// read from its header with the surrounding spaces removed, and a header
// cannot carry control characters. A token pasted with a trailing space or
// newline would otherwise never match, and nothing would say why.
func checkToken(tok string) error {
	if strings.TrimSpace(tok) != tok {
		return errors.New("starts or ends with white space")
	}
	for _, r := range tok {
		if r < 0x20 || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// TLS loads the certificate and key, so that a bad pair stops the service
// at start-up rather than at the first client. Without a certificate it
// returns nil: the service speaks plain HTTP.
func (cfg Config) TLS() (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
