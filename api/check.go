package api

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// checkRequest is the body of POST /v1/check. Its names match ignoring
// letter case (see checkBodyOptions); a top-level member that matches none
// is refused, while context takes anything, so that an agent can send its
// whole context.
type checkRequest struct {
	InputText string       `json:"input_text"`
	Context   checkContext `json:"context"`
	// Tokens is kept raw so that every value that is not an integer from
	// 0 to MaxLimit (a fraction, null, a string) gets one message.
	Tokens jsontext.Value `json:"tokens"`
	// DryRun is kept raw for the same reason: only true and false are
	// read.
	DryRun jsontext.Value `json:"dry_run"`
	// Model names the model the call is for, which prices it: required
	// when the tier limits spend.
	Model string `json:"model"`
	// Unknown collects the top-level members no field takes, as an
	// object; they are refused. It stays nil, and costs nothing, for a
	// body that has none.
	Unknown jsontext.Value `json:",unknown"`
}

type checkContext struct {
	UserID   string `json:"user_id"`
	UserTier string `json:"user_tier"`
	Feature  string `json:"feature"`
	// AccountID names the account of a user whose record names none.
	AccountID string `json:"account_id"`
	// RunID names the run the request is a step of; ParentRunID, on a
	// run's first request, its parent.
	RunID       string `json:"run_id"`
	ParentRunID string `json:"parent_run_id"`
	// Tokens is read only to refuse it: tokens is a top-level member, and
	// context would otherwise ignore it in silence.
	Tokens jsontext.Value `json:"tokens"`
}

func (s *Server) handleCheck(c echo.Context) error {
	start := time.Now()
	req, dryRun, err := readCheck(c)
	if err != nil {
		return err
	}
	d, err := s.svc.Check(c.Request().Context(), req, dryRun)
	s.metrics.observeCheck(&d, err, dryRun, time.Since(start))
	if policy.ErrorCode(err) == policy.EUNAVAILABLE {
		return s.checkStorageFailed(c, req, err)
	}
	if err != nil {
		return err
	}
	return writeDecision(c, &d)
}

// readCheck reads a check's request from its body and its dry run from
// the body's dry_run or the query's, which must agree when both are given.
func readCheck(c echo.Context) (policy.Request, bool, error) {
	query, inQuery, err := queryDryRun(c)
	if err != nil {
		return policy.Request{}, false, err
	}
	var body checkRequest
	if err := readJSON(c.Request().Body, &body, checkBodyOptions); err != nil {
		return policy.Request{}, false, err
	}
	if body.Unknown != nil {
		return policy.Request{}, false, unknownCheckMember(body.Unknown)
	}
	if body.Context.Tokens != nil {
		return policy.Request{}, false, policy.Errorf(policy.EINVALID, `context.tokens: tokens is a top-level field, beside "context", not inside it`)
	}
	tokens, err := checkTokens(body.Tokens)
	if err != nil {
		return policy.Request{}, false, err
	}
	dryRun := query
	if body.DryRun != nil {
		if dryRun, err = parseDryRun(string(body.DryRun)); err != nil {
			return policy.Request{}, false, err
		}
		if inQuery && dryRun != query {
			return policy.Request{}, false, policy.Errorf(policy.EINVALID, `dry_run=%t in the query and "dry_run": %t in the body disagree: give one, or the same in both`, query, dryRun)
		}
	}
	return policy.Request{
		InputText:   body.InputText,
		UserID:      body.Context.UserID,
		Tier:        body.Context.UserTier,
		Feature:     body.Context.Feature,
		Account:     body.Context.AccountID,
		RunID:       body.Context.RunID,
		ParentRunID: body.Context.ParentRunID,
		Tokens:      tokens,
		Model:       body.Model,
	}, dryRun, nil
}

// queryDryRun reads ?dry_run=, and reports whether the query gave it.
func queryDryRun(c echo.Context) (dryRun, given bool, err error) {
	if c.Request().URL.RawQuery == "" { // parsing a query allocates; most checks have none
		return false, false, nil
	}
	values, given := c.QueryParams()["dry_run"]
	if !given {
		return false, false, nil
	}
	if len(values) != 1 {
		return false, true, policy.Errorf(policy.EINVALID, "dry_run must be true or false, given once")
	}
	dryRun, err = parseDryRun(values[0])
	return dryRun, true, err
}

// parseDryRun reads a dry_run of the query or the body: exactly true or
// false, as JSON writes them, and nothing strconv.ParseBool would also take.
func parseDryRun(s string) (bool, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, policy.Errorf(policy.EINVALID, "dry_run must be true or false")
}

// contextNames are the members of a check's context, which a client
// sometimes sends at the top level.
var contextNames = []string{"user_id", "user_tier", "feature", "account_id", "run_id", "parent_run_id"}

// unknownCheckMember is the error for a check body with top-level members
// no field takes, collected in unknown: it names the first, and says where
// it belongs when it is a member of context.
func unknownCheckMember(unknown jsontext.Value) error {
	dec := jsontext.NewDecoder(bytes.NewReader(unknown))
	var name string
	if tok, err := dec.ReadToken(); err == nil && tok.Kind() == '{' {
		if tok, err := dec.ReadToken(); err == nil {
			name = tok.String()
		}
	}
	for _, known := range contextNames {
		if strings.EqualFold(name, known) {
			return policy.Errorf(policy.EINVALID, `unknown field %s: %s belongs in "context"`, policy.Quote(name), known)
		}
	}
	return policy.Errorf(policy.EINVALID, `unknown field %s: a check body holds only input_text, context, tokens, model and dry_run; anything else goes in "context"`, policy.Quote(name))
}

// checkTokens reads the tokens of a check body: absent is 0, and anything
// but an integer from 0 to MaxLimit is refused.
func checkTokens(raw jsontext.Value) (int64, error) {
	if raw == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 || n > policy.MaxLimit {
		return 0, policy.Errorf(policy.EINVALID, "tokens must be an integer from 0 to %d", policy.MaxLimit)
	}
	return n, nil
}
