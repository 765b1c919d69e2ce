package api

import (
	"net/http"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// runInfoJSON is a run as GET /v1/runs/{run_id} and GET /v1/runs answer it.
// Cost is decimal dollars; limits is the tier's run object, null for none.
type runInfoJSON struct {
	RunID         string          `json:"run_id"`
	UserID        string          `json:"user_id"`
	Tier          string          `json:"tier"`
	Parent        *string         `json:"parent"`
	Children      []string        `json:"children"`
	OpenedAt      time.Time       `json:"opened_at"`
	LastAt        time.Time       `json:"last_at"`
	State         string          `json:"state"`
	Requests      int64           `json:"requests"`
	Tokens        int64           `json:"tokens"`
	Cost          string          `json:"cost"`
	CallsInFlight int64           `json:"calls_in_flight"`
	Limits        limitValuesJSON `json:"limits"`
}

// runUsageJSON is the run member of a check's decision and of a user's
// usage asked about a run.
type runUsageJSON struct {
	ID            string          `json:"id"`
	Parent        *string         `json:"parent"`
	State         string          `json:"state"`
	Requests      int64           `json:"requests"`
	Tokens        int64           `json:"tokens"`
	Cost          string          `json:"cost"`
	CallsInFlight int64           `json:"calls_in_flight"`
	Limits        limitValuesJSON `json:"limits"`
}

// runLimitsJSON returns the run limits set, by name; nil for no run
// object.
func runLimitsJSON(set *policy.LimitSet) limitValuesJSON {
	if set == nil {
		return nil
	}
	m := limitValuesJSON{}
	for f := range policy.FieldsIn(policy.ScopeRun) {
		if v := set[f.ID()]; v != nil {
			m[f.Name] = v
		}
	}
	return m
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func runToJSON(r *policy.RunUsage) runInfoJSON {
	children := r.Children
	if children == nil {
		children = []string{}
	}
	return runInfoJSON{RunID: r.ID, UserID: r.UserID, Tier: r.Tier, Parent: nullable(r.Parent), Children: children,
		OpenedAt: r.OpenedAt.UTC(), LastAt: r.LastAt.UTC(), State: string(r.State), Requests: r.Requests,
		Tokens: r.Tokens, Cost: r.Cost.String(), CallsInFlight: r.CallsInFlight, Limits: runLimitsJSON(r.Limits)}
}

func runUsageToJSON(r *policy.RunUsage) *runUsageJSON {
	if r == nil {
		return nil
	}
	return &runUsageJSON{ID: r.ID, Parent: nullable(r.Parent), State: string(r.State), Requests: r.Requests,
		Tokens: r.Tokens, Cost: r.Cost.String(), CallsInFlight: r.CallsInFlight, Limits: runLimitsJSON(r.Limits)}
}

// appendRun appends the run member of a check's decision, when the check
// named a run: written by the library, as it is on no unmetered path.
func appendRun(b []byte, r *policy.RunUsage) []byte {
	if r == nil {
		return b
	}
	out, err := json.Marshal(runUsageToJSON(r), answerOptions)
	if err != nil {
		return b // cannot happen: every field marshals
	}
	b = append(b, `,"run":`...)
	return append(b, out...)
}

func (s *Server) handleGetRun(c echo.Context) error {
	id, err := pathParam(c, "run_id")
	if err != nil {
		return err
	}
	r, err := s.svc.GetRun(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, runToJSON(&r))
}

// handleListRuns answers GET /v1/runs?user_id=&state=, paged as
// GET /v1/users is, by run id.
func (s *Server) handleListRuns(c echo.Context) error {
	limit, after, err := pageQuery(c, "run_id")
	if err != nil {
		return err
	}
	f := policy.RunFilter{UserID: c.QueryParam("user_id"), State: policy.RunState(c.QueryParam("state")), After: after, Limit: limit + 1}
	runs, err := s.svc.ListRuns(c.Request().Context(), f)
	if err != nil {
		return err
	}
	var next *string
	if len(runs) > limit {
		runs = runs[:limit]
		next = &runs[limit-1].ID
	}
	out := make([]runInfoJSON, len(runs))
	for i := range runs {
		out[i] = runToJSON(&runs[i])
		out[i].Children = nil // only GET /v1/runs/{run_id} lists them
	}
	return c.JSON(http.StatusOK, struct {
		Runs []runInfoJSON `json:"runs"`
		Next *string       `json:"next"`
	}{out, next})
}

// handleEndRun ends a run and its descendants: the kill switch.
func (s *Server) handleEndRun(c echo.Context) error {
	id, err := pathParam(c, "run_id")
	if err != nil {
		return err
	}
	r, err := s.svc.EndRun(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, runToJSON(&r))
}
