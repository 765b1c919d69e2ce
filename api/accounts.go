package api

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// accountJSON is an account on the wire: limits holds only the pooled
// limits it overrides, null when none; a limit given as null removes the
// plan's.
type accountJSON struct {
	AccountID string          `json:"account_id"`
	Tier      string          `json:"tier"`
	Limits    limitValuesJSON `json:"limits"`
	// TimeZone and BillingAnchor are what the account sets, absent where
	// it keeps the default.
	TimeZone      string    `json:"time_zone,omitzero"`
	BillingAnchor int       `json:"billing_anchor,omitzero"`
	Note          string    `json:"note"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
}

func accountToJSON(a *policy.Account) accountJSON {
	return accountJSON{AccountID: a.AccountID, Tier: a.Tier, Limits: a.Limits.Values(), Note: a.Note, UpdatedAt: a.UpdatedAt.UTC(),
		TimeZone: a.TimeZone, BillingAnchor: a.BillingAnchor}
}

// accountBody is what a PUT body may hold; account_id and updated_at are
// accepted so that an answer can be sent back as it is.
type accountBody struct {
	AccountID *string                   `json:"account_id"`
	Tier      *string                   `json:"tier"`
	Limits    map[string]jsontext.Value `json:"limits"`
	billingBody
	Note      string         `json:"note"`
	UpdatedAt jsontext.Value `json:"updated_at"`
}

// readAccount reads data, the body of PUT /v1/accounts/{id} (pathID is
// then the id from the path) or one entry of a tiers file's accounts
// (pathID "", and the entry must hold an account_id), and returns the
// account or the first problem with it, as an EINVALID error; the account
// then carries its id, when there is one, to say which entry is wrong.
func readAccount(data []byte, pathID string) (policy.Account, error) {
	var in accountBody
	if err := unmarshalObject(data, &in, strictOptions); err != nil {
		return policy.Account{}, err
	}
	id := pathID
	switch {
	case pathID == "" && in.AccountID == nil:
		return policy.Account{}, policy.Errorf(policy.EINVALID, "account_id is required")
	case pathID == "":
		id = *in.AccountID
	case in.AccountID != nil && *in.AccountID != pathID:
		return policy.Account{}, policy.Errorf(policy.EINVALID, "account_id %s in the body does not match %s in the path", policy.Quote(*in.AccountID), policy.Quote(pathID))
	}
	if in.Tier == nil || *in.Tier == "" {
		return policy.Account{AccountID: id}, policy.Errorf(policy.EINVALID, "tier is required: the name of the account's plan")
	}
	values, err := readLimitValues(in.Limits, "limits")
	if err != nil {
		return policy.Account{AccountID: id}, err
	}
	o, err := policy.PoolOverridesOf(values)
	if err != nil {
		return policy.Account{AccountID: id}, err
	}
	a := policy.Account{AccountID: id, Tier: *in.Tier, Limits: o, Note: in.Note}
	if a.TimeZone, a.BillingAnchor, err = in.read(); err != nil {
		return policy.Account{AccountID: id}, err
	}
	return a, a.Validate()
}

// readLimitValues reads an object of limit fields, each null or a value
// as readLimitValue reads it; prefix names the object in messages.
func readLimitValues(raw map[string]jsontext.Value, prefix string) (map[string]*int64, error) {
	values := make(map[string]*int64, len(raw))
	for name, v := range raw {
		f, ok := policy.LimitFieldNamed(name)
		if !ok || !f.In(policy.ScopeAccount) {
			return nil, policy.Errorf(policy.EINVALID, "unknown field %s in %s", policy.Quote(name), prefix)
		}
		field := prefix + "." + name
		n, err := readLimitValue(f, field, v, fmt.Sprintf("%s must be null or an integer from 0 to %d", field, policy.MaxLimit))
		if err != nil {
			return nil, err
		}
		values[name] = n
	}
	return values, nil
}

func (s *Server) handleListAccounts(c echo.Context) error {
	limit, after, err := pageQuery(c, "account_id")
	if err != nil {
		return err
	}
	accounts, err := s.svc.Accounts(c.Request().Context(), after, limit+1)
	if err != nil {
		return err
	}
	var next *string
	if len(accounts) > limit {
		accounts = accounts[:limit]
		next = &accounts[limit-1].AccountID
	}
	out := make([]accountJSON, len(accounts))
	for i := range accounts {
		out[i] = accountToJSON(&accounts[i])
	}
	return c.JSON(http.StatusOK, struct {
		Accounts []accountJSON `json:"accounts"`
		Next     *string       `json:"next"`
	}{out, next})
}

func (s *Server) handleGetAccount(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	a, err := s.svc.Account(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, accountToJSON(&a))
}

func (s *Server) handlePutAccount(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	a, err := readAccount(data, id)
	if err != nil {
		return err
	}
	a, created, err := s.svc.PutAccount(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), a)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, accountToJSON(&a))
}

func (s *Server) handleDeleteAccount(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	if err := s.svc.DeleteAccount(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// accountUsageResponse is GET /v1/accounts/{id}/usage: the pooled state in
// the shape of GET /v1/usage/{user_id}, limit, remaining and reset given
// for the windows the pool limits.
type accountUsageResponse struct {
	AccountID     string              `json:"account_id"`
	Tier          string              `json:"tier"`
	Limits        limitValuesJSON     `json:"limits"`
	Windows       usageWindowsReponse `json:"windows"`
	CallsInFlight int64               `json:"calls_in_flight"`
	// Period is the pool's current billing period, for information.
	Period periodJSON `json:"period"`
}

func (s *Server) handleGetAccountUsage(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	u, err := s.svc.AccountUsage(c.Request().Context(), id)
	if err != nil {
		return err
	}
	period, err := s.svc.AccountPeriod(&u.Account)
	if err != nil {
		return err
	}
	st := policy.AccountState{Limits: u.Limits}
	return c.JSON(http.StatusOK, accountUsageResponse{
		Period:        periodToJSON(period),
		AccountID:     id,
		Tier:          u.Account.Tier,
		Limits:        u.Limits.Values(policy.ScopeAccount),
		CallsInFlight: u.CallsInFlight,
		Windows:       usageWindowsOf(&u.Windows, st.Limited),
	})
}

func (s *Server) handleDeleteAccountUsage(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	if _, err := s.svc.Account(c.Request().Context(), id); err != nil {
		return err
	}
	if err := s.svc.ForgetAccount(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// DescribeAccountChange says what an import did to an account in one line,
// as the import report words it: "created account acme: tier team;
// requests_per_minute 100".
func DescribeAccountChange(c policy.AccountChange) string {
	verb := "updated"
	if c.Old == nil {
		verb = "created"
	}
	return verb + " account " + c.AccountID + ": " + policy.AccountSummary(c.New)
}
