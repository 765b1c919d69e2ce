package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// RunUsage is a run as a check's decision shows it: what the run and its
// descendants used against the tier's run limits.
type RunUsage struct {
	ID     string `json:"id"`
	Parent string `json:"parent"`
	// State is open, exhausted, ended or expired.
	State    string `json:"state"`
	Requests int64  `json:"requests"`
	Tokens   int64  `json:"tokens"`
	// Cost is US dollars as a decimal string.
	Cost          string `json:"cost"`
	CallsInFlight int64  `json:"calls_in_flight"`
	// Limits is the tier's run object; nil when it has none.
	Limits *RunLimits `json:"limits"`
}

// Run is an agent run as GET /v1/runs/{run_id} answers it. Requests,
// Tokens and Cost include its descendants'.
type Run struct {
	ID     string `json:"run_id"`
	UserID string `json:"user_id"`
	Tier   string `json:"tier"`
	Parent string `json:"parent"`
	// Children names the runs whose parent this is; empty from ListRuns.
	Children []string  `json:"children"`
	OpenedAt time.Time `json:"opened_at"`
	LastAt   time.Time `json:"last_at"`
	// State is open, exhausted, ended or expired.
	State         string     `json:"state"`
	Requests      int64      `json:"requests"`
	Tokens        int64      `json:"tokens"`
	Cost          string     `json:"cost"`
	CallsInFlight int64      `json:"calls_in_flight"`
	Limits        *RunLimits `json:"limits"`
}

// GetRun returns the run named id, or an *Error with status 404.
func (c *Client) GetRun(ctx context.Context, id string) (Run, error) {
	var r Run
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), c.adminToken, nil, &r, http.StatusOK)
	return r, err
}

// ListRuns returns up to limit runs (0: the service's default) whose ids
// sort after after, of userID and in state when they are not empty, and
// the after of the next page ("" on the last).
func (c *Client) ListRuns(ctx context.Context, userID, state, after string, limit int) (runs []Run, next string, err error) {
	q := url.Values{}
	for k, v := range map[string]string{"user_id": userID, "state": state, "after": after} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/runs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Runs []Run   `json:"runs"`
		Next *string `json:"next"`
	}
	if _, err := c.do(ctx, http.MethodGet, path, c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, "", err
	}
	if out.Next != nil {
		next = *out.Next
	}
	return out.Runs, next, nil
}

// EndRun ends the run named id and its descendants' runs (an admin's
// token): the next check naming any of them is refused; calls in flight
// finish normally. It returns the run as ended.
func (c *Client) EndRun(ctx context.Context, id string) (Run, error) {
	var r Run
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/end", c.adminToken, nil, &r, http.StatusOK)
	return r, err
}
