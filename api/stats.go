package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// statsResponse is the body of GET /v1/stats.
type statsResponse struct {
	Period        string      `json:"period"`
	From          time.Time   `json:"from"`
	To            time.Time   `json:"to"`
	BucketSeconds int64       `json:"bucket_seconds"`
	Tiers         []statsTier `json:"tiers"`
}

type statsTier struct {
	Tier    string        `json:"tier"`
	Buckets []statsBucket `json:"buckets"`
}

type statsBucket struct {
	Start         time.Time        `json:"start"`
	Admitted      int64            `json:"admitted"`
	Refused       int64            `json:"refused"`
	RefusedBy     map[string]int64 `json:"refused_by"`
	ShadowRefused map[string]int64 `json:"shadow_refused"`
	TokensSettled int64            `json:"tokens_settled"`
}

func (s *Server) handleStats(c echo.Context) error {
	// Without a period, the last hour; a period given empty is a mistake
	// like any other name.
	p := policy.PeriodHour
	if names, given := c.QueryParams()["period"]; given {
		var err error
		if p, err = policy.ParsePeriod(names[0]); err != nil {
			return err
		}
	}
	tier := c.QueryParam("tier")
	if tier != "" && !policy.ValidTierName(tier) {
		return policy.Errorf(policy.EINVALID, "unknown tier %s", policy.Quote(tier))
	}
	stats, err := s.svc.Stats(c.Request().Context(), p, tier)
	if err != nil {
		return err
	}
	from, to := p.Span(s.svc.Now())
	out := statsResponse{Period: p.Name, From: from, To: to, BucketSeconds: int64(p.Bucket / time.Second), Tiers: make([]statsTier, len(stats))}
	for i, ts := range stats {
		st := statsTier{Tier: ts.Tier, Buckets: make([]statsBucket, len(ts.Buckets))}
		for j, b := range ts.Buckets {
			sb := statsBucket{Start: b.Start, Admitted: b.Admitted, Refused: b.Refused, RefusedBy: b.RefusedBy,
				ShadowRefused: b.Shadow, TokensSettled: b.TokensSettled}
			if sb.RefusedBy == nil {
				sb.RefusedBy = map[string]int64{}
			}
			if sb.ShadowRefused == nil {
				sb.ShadowRefused = map[string]int64{}
			}
			st.Buckets[j] = sb
		}
		out.Tiers[i] = st
	}
	return c.JSON(http.StatusOK, out)
}
