package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// tierJSON is a tier on the wire.
type tierJSON struct {
	Name              string     `json:"name"`
	RequestsPerMinute int64      `json:"requests_per_minute"`
	RequestsPerHour   int64      `json:"requests_per_hour"`
	RequestsPerDay    int64      `json:"requests_per_day"`
	BurstAllowance    int64      `json:"burst_allowance"`
	Features          []string   `json:"features"`
	Description       string     `json:"description"`
	UpdatedAt         *time.Time `json:"updated_at,omitempty"`
}

func tierToJSON(t policy.Tier) tierJSON {
	j := tierJSON{
		Name:              t.Name,
		RequestsPerMinute: t.RequestsPerMinute,
		RequestsPerHour:   t.RequestsPerHour,
		RequestsPerDay:    t.RequestsPerDay,
		BurstAllowance:    t.BurstAllowance,
		Features:          t.Features,
		Description:       t.Description,
	}
	if j.Features == nil {
		j.Features = []string{}
	}
	if !t.UpdatedAt.IsZero() {
		u := t.UpdatedAt.UTC()
		j.UpdatedAt = &u
	}
	return j
}

// tierInput is the body of PUT /v1/tiers/{name}. Fields stay raw so that each
// problem can be reported by field: a fraction, a string where a number
// belongs, a missing limit.
type tierInput struct {
	Name              json.RawMessage `json:"name"`
	RequestsPerMinute json.RawMessage `json:"requests_per_minute"`
	RequestsPerHour   json.RawMessage `json:"requests_per_hour"`
	RequestsPerDay    json.RawMessage `json:"requests_per_day"`
	BurstAllowance    json.RawMessage `json:"burst_allowance"`
	Features          json.RawMessage `json:"features"`
	Description       json.RawMessage `json:"description"`
	// updated_at is accepted so that a GET answer can be sent back as is;
	// the server sets the time of the change.
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// tier validates in against the tier name from the path and returns its
// first problem, as PUT /v1/tiers/{name} answers it.
func (in *tierInput) tier(name string) (policy.Tier, error) {
	t, problems := in.tierProblems(name)
	if len(problems) > 0 {
		return t, policy.Errorf(policy.EINVALID, "%s", problems[0])
	}
	return t, nil
}

// tierProblems validates in against the tier name from the path and returns
// every problem, in field order, as a tiers file's import lists them.
func (in *tierInput) tierProblems(name string) (policy.Tier, []string) {
	t := policy.Tier{Name: name, Features: []string{}}
	var problems []string
	if !policy.ValidTierName(name) {
		problems = append(problems, "tier name must match [a-z0-9][a-z0-9_-]{0,62}")
	}
	if in.Name != nil {
		var bodyName string
		if err := json.Unmarshal(in.Name, &bodyName); err != nil {
			problems = append(problems, "name must be a string")
		} else if bodyName != name {
			problems = append(problems, fmt.Sprintf("name %q in the body does not match %q in the path", bodyName, name))
		}
	}
	for _, l := range []struct {
		field string
		raw   json.RawMessage
		dst   *int64
	}{
		{"requests_per_minute", in.RequestsPerMinute, &t.RequestsPerMinute},
		{"requests_per_hour", in.RequestsPerHour, &t.RequestsPerHour},
		{"requests_per_day", in.RequestsPerDay, &t.RequestsPerDay},
		{"burst_allowance", in.BurstAllowance, &t.BurstAllowance},
	} {
		v, err := parseLimit(l.field, l.raw)
		if err != nil {
			problems = append(problems, policy.ErrorMessage(err))
		}
		*l.dst = v
	}
	if len(in.Features) > 0 && !bytes.Equal(in.Features, []byte("null")) {
		if err := json.Unmarshal(in.Features, &t.Features); err != nil || t.Features == nil {
			problems = append(problems, "features must be an array of strings")
			t.Features = []string{}
		}
	}
	if len(in.Description) > 0 && !bytes.Equal(in.Description, []byte("null")) {
		if err := json.Unmarshal(in.Description, &t.Description); err != nil {
			problems = append(problems, "description must be a string")
		}
	}
	for _, fe := range t.ValidateFields() {
		if fe.Field != "name" { // said above, in the API's words
			problems = append(problems, fe.Message)
		}
	}
	return t, problems
}

// parseLimit reads a required limit: a JSON integer from 0 to MaxLimit.
func parseLimit(field string, raw json.RawMessage) (int64, error) {
	if len(raw) == 0 {
		return 0, policy.Errorf(policy.EINVALID, "%s is required", field)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || v < 0 || v > policy.MaxLimit {
		return 0, policy.Errorf(policy.EINVALID, "%s must be an integer from 0 to %d", field, policy.MaxLimit)
	}
	return v, nil
}

func (s *Server) handleListTiers(c echo.Context) error {
	tiers, err := s.svc.Tiers(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]tierJSON, len(tiers))
	for i, t := range tiers {
		out[i] = tierToJSON(t)
	}
	return c.JSON(http.StatusOK, map[string]any{"tiers": out})
}

func (s *Server) handleGetTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	t, err := s.svc.Tier(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tierToJSON(t))
}

func (s *Server) handlePutTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	var in tierInput
	if err := decodeJSON(c.Request().Body, &in, true); err != nil {
		return err
	}
	t, err := in.tier(name)
	if err != nil {
		return err
	}
	ctx := policy.WithChangeSource(c.Request().Context(), policy.SourceAPI)
	// If-None-Match: * (RFC 9110, section 13.1.2) makes the PUT create
	// only, so that a client never replaces a tier made by someone else.
	// Other values name entity tags, which tiers do not have: none can
	// match, so the PUT goes ahead.
	if ifNoneMatchAny(c.Request().Header.Values("If-None-Match")) {
		t, err := s.svc.CreateTier(ctx, t)
		if policy.ErrorCode(err) == policy.ECONFLICT {
			return echo.NewHTTPError(http.StatusPreconditionFailed, policy.ErrorMessage(err)+" (If-None-Match: *)")
		}
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, tierToJSON(t))
	}
	t, created, err := s.svc.PutTier(ctx, t)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, tierToJSON(t))
}

// ifNoneMatchAny reports whether If-None-Match header values are "*".
func ifNoneMatchAny(values []string) bool {
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			if strings.TrimSpace(tag) == "*" {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleDeleteTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := s.svc.DeleteTier(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
