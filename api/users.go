package api

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// Pages of GET /v1/users.
const (
	DefaultUsersPage = 100
	MaxUsersPage     = 1000
)

// userJSON is a user record on the wire: the answers of /v1/users and each
// entry of a tiers file's users list. Limits holds only the overridden
// limits, null when there are none; a token limit or max_concurrent given
// as null removes the tier's limit for the user.
type userJSON struct {
	UserID  string          `json:"user_id"`
	Tier    *string         `json:"tier"`
	Account *string         `json:"account,omitempty"`
	Limits  limitValuesJSON `json:"limits"`
	// TimeZone and BillingAnchor are what the record sets, absent where it
	// keeps the default: an answer sent back as it is then pins nothing.
	TimeZone      string    `json:"time_zone,omitzero"`
	BillingAnchor int       `json:"billing_anchor,omitzero"`
	Note          string    `json:"note"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
}

func userToJSON(r policy.UserRecord) userJSON {
	j := userJSON{UserID: r.UserID, Limits: r.Limits.Values(), Note: r.Note, UpdatedAt: r.UpdatedAt.UTC(),
		TimeZone: r.TimeZone, BillingAnchor: r.BillingAnchor}
	if r.Tier != "" {
		j.Tier = &r.Tier
	}
	if r.Account != "" {
		j.Account = &r.Account
	}
	return j
}

// userBody is what a PUT body or a tiers file entry may hold. user_id and
// updated_at are accepted so that an answer can be sent back as it is.
type userBody struct {
	UserID  *string                   `json:"user_id"`
	Tier    *string                   `json:"tier"`
	Account *string                   `json:"account"`
	Limits  map[string]jsontext.Value `json:"limits"`
	billingBody
	Note      string         `json:"note"`
	UpdatedAt jsontext.Value `json:"updated_at"`
}

// billingBody is the billing cycle of a record's or an account's body:
// absent or null keeps the default.
type billingBody struct {
	TimeZone      *string        `json:"time_zone"`
	BillingAnchor jsontext.Value `json:"billing_anchor"`
}

// read returns the time zone and anchor b sets, "" and 0 where it keeps
// the default, or an EINVALID error naming the field.
func (b *billingBody) read() (zone string, anchor int, err error) {
	if b.TimeZone != nil {
		if _, err := policy.LoadTimeZone(*b.TimeZone); err != nil {
			return "", 0, err
		}
		zone = *b.TimeZone
	}
	if len(b.BillingAnchor) > 0 && b.BillingAnchor.Kind() != 'n' {
		var n *int
		if json.Unmarshal(b.BillingAnchor, &n) != nil || n == nil || *n < 1 || *n > policy.MaxBillingAnchor {
			return "", 0, policy.Errorf(policy.EINVALID, "billing_anchor must be an integer from 1 to %d", policy.MaxBillingAnchor)
		}
		anchor = *n
	}
	return zone, anchor, nil
}

// readUser reads data, the body of PUT /v1/users/{user_id} (pathID is then
// the id from the path) or one entry of a tiers file's users (pathID "",
// and the entry must hold a user_id), and returns the record or the first
// problem with it, as an EINVALID error that names the field; the record
// then carries the user id, when there is one, to say which entry is wrong.
func readUser(data []byte, pathID string) (policy.UserRecord, error) {
	var in userBody
	if err := unmarshalObject(data, &in, strictOptions); err != nil {
		return policy.UserRecord{}, err
	}
	id := pathID
	switch {
	case pathID == "" && in.UserID == nil:
		return policy.UserRecord{}, policy.Errorf(policy.EINVALID, "user_id is required")
	case pathID == "":
		id = *in.UserID
	case in.UserID != nil && *in.UserID != pathID:
		return policy.UserRecord{}, policy.Errorf(policy.EINVALID, "user_id %s in the body does not match %s in the path", policy.Quote(*in.UserID), policy.Quote(pathID))
	}
	r := policy.UserRecord{UserID: id, Note: in.Note}
	var err error
	if r.TimeZone, r.BillingAnchor, err = in.read(); err != nil {
		return policy.UserRecord{UserID: id}, err
	}
	if in.Tier != nil {
		if *in.Tier == "" {
			return policy.UserRecord{UserID: id}, policy.Errorf(policy.EINVALID, "tier must be null or a tier name, not \"\"")
		}
		r.Tier = *in.Tier
	}
	if in.Account != nil {
		if *in.Account == "" {
			return policy.UserRecord{UserID: id}, policy.Errorf(policy.EINVALID, "account must be null or an account id, not \"\"")
		}
		r.Account = *in.Account
	}
	values := make(map[string]*int64, len(in.Limits))
	for _, name := range policy.LimitNames {
		raw, ok := in.Limits[name]
		if !ok {
			continue
		}
		f, _ := policy.LimitFieldNamed(name)
		v, err := readLimitValue(f, "limits."+name, raw, fmt.Sprintf("limits.%s must be an integer from 0 to %d", name, policy.MaxLimit))
		if err != nil {
			return policy.UserRecord{UserID: id}, err
		}
		values[name] = v
	}
	for name := range in.Limits {
		if _, ok := values[name]; !ok {
			return policy.UserRecord{UserID: id}, policy.Errorf(policy.EINVALID, "unknown field %s in limits", policy.Quote(name))
		}
	}
	l, err := policy.LimitsOf(values)
	if err != nil {
		return policy.UserRecord{UserID: id}, policy.Errorf(policy.EINVALID, "limits.%s", policy.ErrorMessage(err))
	}
	r.Limits = l
	if errs := r.ValidateFields(); len(errs) > 0 {
		msg := errs[0].Message
		if _, limit := in.Limits[errs[0].Field]; limit {
			msg = "limits." + msg
		}
		return policy.UserRecord{UserID: id}, policy.Errorf(policy.EINVALID, "%s", msg)
	}
	return r, nil
}

// pageQuery reads a listing's ?limit= and ?after=, an id of the kind
// named (user_id, account_id), which follows the rules of user ids.
func pageQuery(c echo.Context, kind string) (limit int, after string, err error) {
	limit = DefaultUsersPage
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxUsersPage {
			return 0, "", policy.Errorf(policy.EINVALID, "limit must be an integer from 1 to %d", MaxUsersPage)
		}
		limit = n
	}
	after = c.QueryParam("after")
	if err := policy.ValidateUserID(after); err != nil {
		return 0, "", policy.Errorf(policy.EINVALID, "after: %s", strings.Replace(policy.ErrorMessage(err), "user_id", kind, 1))
	}
	return limit, after, nil
}

func (s *Server) handleListUsers(c echo.Context) error {
	limit, after, err := pageQuery(c, "user_id")
	if err != nil {
		return err
	}
	// One more than asked, to know whether there is a next page.
	records, err := s.svc.Users(c.Request().Context(), after, limit+1)
	if err != nil {
		return err
	}
	var next *string
	if len(records) > limit {
		records = records[:limit]
		next = &records[limit-1].UserID
	}
	out := make([]userJSON, len(records))
	for i, r := range records {
		out[i] = userToJSON(r)
	}
	return c.JSON(http.StatusOK, struct {
		Users []userJSON `json:"users"`
		Next  *string    `json:"next"`
	}{out, next})
}

func (s *Server) handleGetUser(c echo.Context) error {
	id, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	r, err := s.svc.User(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, userToJSON(r))
}

func (s *Server) handlePutUser(c echo.Context) error {
	id, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	r, err := readUser(data, id)
	if err != nil {
		return err
	}
	r, created, err := s.svc.PutUser(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), r)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, userToJSON(r))
}

func (s *Server) handleDeleteUser(c echo.Context) error {
	id, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	if err := s.svc.DeleteUser(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// DescribeUserChange says what c did in one line, as the import report
// words it: "created user alice: tier pro; requests_per_minute 5".
func DescribeUserChange(c policy.UserChange) string {
	switch {
	case c.New == nil:
		return "deleted user " + c.UserID
	case c.Old == nil:
		return "created user " + c.UserID + ": " + policy.UserSummary(c.New)
	}
	return "updated user " + c.UserID + ": " + policy.UserSummary(c.New)
}
