package api

import (
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// previewResponse is the answer of POST /v1/tiers/{name}/preview.
type previewResponse struct {
	Tier            string            `json:"tier"`
	From            time.Time         `json:"from"`
	To              time.Time         `json:"to"`
	Users           int64             `json:"users"`
	Requests        int64             `json:"requests"`
	UsersRefused    int64             `json:"users_refused"`
	RequestsRefused int64             `json:"requests_refused"`
	RefusedByWindow refusedByWindow   `json:"refused_by_window"`
	TopUsers        []topUserResponse `json:"top_users"`
	// The pools of the tier's accounts, replayed apart from users.
	AccountsRefused        int64           `json:"accounts_refused"`
	RefusedByAccountWindow refusedByWindow `json:"refused_by_account_window"`
	// UsersOver and AccountsOver count the users replayed, and the
	// accounts on the tier, whose current billing period or spend
	// already passes the proposed month and spend limits.
	UsersOver    int64 `json:"users_over"`
	AccountsOver int64 `json:"accounts_over"`
}

type refusedByWindow struct {
	Minute int64 `json:"minute"`
	Hour   int64 `json:"hour"`
	Day    int64 `json:"day"`
}

type topUserResponse struct {
	UserID   string `json:"user_id"`
	Requests int64  `json:"requests"`
	Refused  int64  `json:"refused"`
}

func previewToJSON(p *policy.Preview) previewResponse {
	res := previewResponse{
		Tier: p.Tier, From: p.From.UTC(), To: p.To.UTC(),
		Users: p.Users, Requests: p.Requests, UsersRefused: p.UsersRefused, RequestsRefused: p.RequestsRefused,
		RefusedByWindow: refusedByWindow{p.RefusedBy[policy.Minute], p.RefusedBy[policy.Hour], p.RefusedBy[policy.Day]},
		TopUsers:        make([]topUserResponse, len(p.TopUsers)),
		AccountsRefused: p.AccountsRefused,
		RefusedByAccountWindow: refusedByWindow{p.RefusedByAccount[policy.Minute], p.RefusedByAccount[policy.Hour],
			p.RefusedByAccount[policy.Day]},
		UsersOver: p.UsersOver, AccountsOver: p.AccountsOver,
	}
	for i, u := range p.TopUsers {
		res.TopUsers[i] = topUserResponse{u.UserID, u.Requests, u.Refused}
	}
	return res
}

// handlePreviewTier replays the tier's last day of requests through the
// limits of the body, a tier as PUT /v1/tiers/{name} takes it: users'
// through its request limits, accounts' pools through those of its
// account object. It changes nothing; its cost is one read of the
// requests table and one of each account whose pool it replays.
func (s *Server) handlePreviewTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	t, problems := readTier(data, name)
	if len(problems) > 0 {
		return policy.Errorf(policy.EINVALID, "%s", problems[0])
	}
	p, err := s.svc.PreviewTierChange(c.Request().Context(), name, &t)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, previewToJSON(&p))
}

// handlePromoteTier makes the tier's shadow limits its real limits.
func (s *Server) handlePromoteTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	t, err := s.svc.PromoteShadow(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), name, nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tierToJSON(t))
}
