package api

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// tierJSON is a tier on the wire: the answers and bodies of /v1/tiers,
// each entry of a tiers file, and the before and after of a change on the
// admin page. UpdatedAt is left out when zero: a tiers file and a change
// leave it zero, so that a file kept in a repository changes only when a
// tier does; a body may carry it, so that an answer can be sent back as
// is, and the server then sets the time of the change.
type tierJSON struct {
	Name              string `json:"name"`
	RequestsPerMinute int64  `json:"requests_per_minute"`
	RequestsPerHour   int64  `json:"requests_per_hour"`
	RequestsPerDay    int64  `json:"requests_per_day"`
	BurstAllowance    int64  `json:"burst_allowance"`
	// The metering limits: null (or absent from a body) sets no limit.
	TokensPerMinute *int64    `json:"tokens_per_minute"`
	TokensPerHour   *int64    `json:"tokens_per_hour"`
	TokensPerDay    *int64    `json:"tokens_per_day"`
	MaxConcurrent   *int64    `json:"max_concurrent"`
	Features        []string  `json:"features"` // nil is written []
	Description     string    `json:"description"`
	UpdatedAt       time.Time `json:"updated_at,omitzero"`
	// Shadow is left out when the tier has none, so that a tiers file
	// without shadow limits reads as before; a body may send it null.
	Shadow *limitsJSON `json:"shadow,omitzero"`
}

// limitsJSON is the request limits of a tier's shadow: all four required.
type limitsJSON struct {
	RequestsPerMinute int64 `json:"requests_per_minute"`
	RequestsPerHour   int64 `json:"requests_per_hour"`
	RequestsPerDay    int64 `json:"requests_per_day"`
	BurstAllowance    int64 `json:"burst_allowance"`
}

func tierToJSON(t policy.Tier) tierJSON {
	j := tierJSON{Name: t.Name, RequestsPerMinute: t.RequestsPerMinute, RequestsPerHour: t.RequestsPerHour,
		RequestsPerDay: t.RequestsPerDay, BurstAllowance: t.BurstAllowance,
		TokensPerMinute: t.TokensPerMinute, TokensPerHour: t.TokensPerHour, TokensPerDay: t.TokensPerDay,
		MaxConcurrent: t.MaxConcurrent, Features: t.Features, Description: t.Description, UpdatedAt: t.UpdatedAt.UTC()}
	if l := t.Shadow; l != nil {
		j.Shadow = &limitsJSON{l.RequestsPerMinute, l.RequestsPerHour, l.RequestsPerDay, l.BurstAllowance}
	}
	return j
}

// tierFields are a tier's fields in the order their problems are listed.
var tierFields = [...]string{"name", "requests_per_minute", "requests_per_hour", "requests_per_day", "burst_allowance",
	"tokens_per_minute", "tokens_per_hour", "tokens_per_day", "max_concurrent", "features", "description",
	"shadow", "shadow.requests_per_minute", "shadow.requests_per_hour", "shadow.requests_per_day", "shadow.burst_allowance"}

// readTier reads data, the body of PUT /v1/tiers/{name} (pathName is then
// the name from the path) or one entry of a tiers file (pathName "", and
// the entry must hold a name), and returns the tier with every problem it
// has, in field order. A value of the wrong type is a problem of its field
// and reading goes on, so that a tiers file's report lists them all; a
// body that is not JSON, or names an unknown field, is one problem. The
// tier carries the name whenever there is one, to say which entry is wrong.
func readTier(data []byte, pathName string) (policy.Tier, []string) {
	problems := make(map[string][]string)
	present := make(map[string]bool)
	// must reads a value of type T, or notes that its field must be one.
	must := func(want string) func(*jsontext.Decoder, any) error {
		return func(dec *jsontext.Decoder, v any) error {
			p := dec.StackPointer()
			field := p.LastToken()
			if p.Parent() != "" { // in the shadow object
				field = p.Parent().LastToken() + "." + field
			}
			val, err := dec.ReadValue()
			if err != nil {
				return err
			}
			present[field] = true
			if json.Unmarshal(val, v) != nil {
				problems[field] = append(problems[field], field+" must be "+want)
			}
			return nil
		}
	}
	limit, str := must(fmt.Sprintf("an integer from 0 to %d", policy.MaxLimit)), must("a string")
	features := must("an array of strings")
	var in tierJSON
	err := unmarshalObject(data, &in, json.JoinOptions(strictOptions, json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *int64) error { return limit(dec, v) }),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *string) error { return str(dec, v) }),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *[]string) error { return features(dec, v) }),
	))))
	name := pathName
	if name == "" {
		name = in.Name
	}
	if err != nil {
		if name == "" { // the name leniently, to say which entry is wrong
			var named struct{ Name string }
			_ = json.Unmarshal(data, &named)
			name = named.Name
		}
		return policy.Tier{Name: name}, []string{policy.ErrorMessage(err)}
	}
	switch {
	case pathName == "" && !present["name"]:
		return policy.Tier{}, []string{"name is required"}
	case pathName == "" && problems["name"] != nil:
		return policy.Tier{}, problems["name"]
	case pathName != "" && present["name"] && problems["name"] == nil && in.Name != pathName:
		problems["name"] = []string{fmt.Sprintf("name %s in the body does not match %s in the path", policy.Quote(in.Name), policy.Quote(pathName))}
	}
	if !policy.ValidTierName(name) {
		problems["name"] = append([]string{"tier name must match [a-z0-9][a-z0-9_-]{0,62}"}, problems["name"]...)
	}
	t := policy.Tier{Name: name, RequestsPerMinute: in.RequestsPerMinute, RequestsPerHour: in.RequestsPerHour,
		RequestsPerDay: in.RequestsPerDay, BurstAllowance: in.BurstAllowance,
		TokensPerMinute: in.TokensPerMinute, TokensPerHour: in.TokensPerHour, TokensPerDay: in.TokensPerDay,
		MaxConcurrent: in.MaxConcurrent, Features: in.Features, Description: in.Description}
	if t.Features == nil {
		t.Features = []string{}
	}
	required := tierFields[1:5]
	if l := in.Shadow; l != nil {
		t.Shadow = &policy.RequestLimits{RequestsPerMinute: l.RequestsPerMinute, RequestsPerHour: l.RequestsPerHour,
			RequestsPerDay: l.RequestsPerDay, BurstAllowance: l.BurstAllowance}
		required = append(required[:4:4], tierFields[len(tierFields)-4:]...) // the shadow's four
	}
	for _, field := range required {
		if !present[field] {
			problems[field] = append(problems[field], field+" is required")
		}
	}
	for _, fe := range t.ValidateFields() {
		if fe.Field != "name" && problems[fe.Field] == nil { // said above, in the API's words
			problems[fe.Field] = append(problems[fe.Field], fe.Message)
		}
	}
	var list []string
	for _, field := range tierFields {
		list = append(list, problems[field]...)
	}
	return t, list
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
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	t, problems := readTier(data, name)
	if len(problems) > 0 {
		return policy.Errorf(policy.EINVALID, "%s", problems[0])
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
