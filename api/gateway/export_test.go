package gateway

import "time"

// SetHooks gives the gateway of cfg, for a test, the ticker that paces
// its keepalives and functions run when an exchange's client went away
// and when an exchange was settled. Nil leaves one as it is.
func SetHooks(cfg *Config, ticker func(time.Duration) (<-chan time.Time, func()), clientGone, settled func()) {
	if ticker != nil {
		cfg.ticker = ticker
	}
	if clientGone != nil {
		cfg.onClientGone = clientGone
	}
	if settled != nil {
		cfg.onSettled = settled
	}
}

// SetSettleTimeout makes cfg's gateway wait up to d for a settle or a
// keepalive, for tests whose machine may keep one waiting on a lock
// longer than the default.
func SetSettleTimeout(cfg *Config, d time.Duration) { cfg.settleTimeout = d }
