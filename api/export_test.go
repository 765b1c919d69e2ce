package api

import "time"

// SetGatewayHooks gives the gateway of s, for a test, the ticker that
// paces its keepalives and functions run when an exchange's client went
// away and when an exchange was settled. Nil leaves one as it is. Call it
// before s serves any request.
func SetGatewayHooks(s *Server, ticker func(time.Duration) (<-chan time.Time, func()), clientGone, settled func()) {
	if ticker != nil {
		s.gateway.ticker = ticker
	}
	if clientGone != nil {
		s.gateway.onClientGone = clientGone
	}
	if settled != nil {
		s.gateway.onSettled = settled
	}
}
