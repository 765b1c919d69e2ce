package gateway

import (
	"fmt"
	"net/http"

	"github.com/policyguard/policyguard/policy"
)

// An agent names the run a call is a step of in X-Guard-Run, and a
// sub-agent's first call may name the run's parent in X-Guard-Parent-Run:
// they become the check's RunID and ParentRunID (see policy.Run), and
// like every X-Guard-* field they never reach the upstream. A run's
// budget refusal is answered 403 in the protocol's permission shape,
// which no official SDK retries: waiting never frees a run's budget, and
// a retry would only be refused again. Its max_concurrent is a 429, as
// other concurrency limits are, since a slot frees.

// Header fields naming a request's run and its parent.
const (
	headerGuardRun       = "X-Guard-Run"
	headerGuardParentRun = "X-Guard-Parent-Run"
)

// runOf reads the run and parent run the request names ("" for none),
// each a run id once. Otherwise it answers 400.
func (x *exchange) runOf() (run, parent string, ok bool) {
	if run, ok = x.runHeader(headerGuardRun); !ok {
		return "", "", false
	}
	if parent, ok = x.runHeader(headerGuardParentRun); !ok {
		return "", "", false
	}
	switch {
	case parent != "" && run == "":
		x.fail(http.StatusBadRequest, errInvalid, headerGuardParentRun+" needs "+headerGuardRun+": it names the parent of the run the request is a step of")
		return "", "", false
	case parent != "" && parent == run:
		x.fail(http.StatusBadRequest, errInvalid, headerGuardParentRun+" must differ from "+headerGuardRun+": a run cannot be its own parent")
		return "", "", false
	}
	return run, parent, true
}

// runHeader returns the run id header field name holds, "" when absent.
// Otherwise it answers 400.
func (x *exchange) runHeader(name string) (string, bool) {
	vs, has := x.req.Header[name]
	switch {
	case !has:
		return "", true
	case len(vs) != 1:
		x.fail(http.StatusBadRequest, errInvalid, name+" must be given once")
	case vs[0] == "":
		x.fail(http.StatusBadRequest, errInvalid, name+" must not be empty")
	default:
		if err := policy.ValidateRunID(name, vs[0]); err != nil {
			x.fail(http.StatusBadRequest, errInvalid, policy.ErrorMessage(err))
			return "", false
		}
		return vs[0], true
	}
	return "", false
}

// runRequired reports whether a checked request of tier t names its run
// when t's run object requires one. Otherwise it answers 400.
func (x *exchange) runRequired(t *policy.Tier) bool {
	if !t.RunRequired || x.runID != "" {
		return true
	}
	x.fail(http.StatusBadRequest, errInvalid, fmt.Sprintf("tier %s requires %s: name the run each request is a step of", policy.Quote(t.Name), headerGuardRun))
	return false
}

// runRefused answers a check a run's budget refused for good (d.Outcome
// Denied): 403, with no field that asks the client to wait.
func (x *exchange) runRefused(d *policy.Decision) {
	x.fail(http.StatusForbidden, errRunBudget, d.Reason)
}

// conflict answers a request naming a run another user's request opened,
// or with a parent other than the run's own: 409, as the API
// answers, with x-should-retry: false, for the official SDKs would retry
// a 409 and no retry can make the run the user's.
func (x *exchange) conflict(msg string) {
	x.c.Response().Header().Set(headerShouldRetry, "false")
	x.fail(http.StatusConflict, errConflict, msg)
}
