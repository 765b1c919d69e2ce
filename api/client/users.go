package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// User is a user record: the tier the user's checks are decided under,
// whatever they name, and the limits of that tier replaced for the user.
type User struct {
	UserID string
	// Tier is the assigned tier; empty assigns none.
	Tier string
	// Account names the account the user belongs to, whose pooled limits
	// every check of theirs must also pass; empty for none. A member
	// without a Tier is checked under the account's.
	Account string
	// Limits holds the overridden limits by their API names
	// (requests_per_minute, ..., tokens_per_day, max_concurrent); a limit
	// left out keeps the tier's value, and a nil token limit or
	// max_concurrent removes the tier's limit for the user.
	Limits map[string]*int64
	// Spend holds the overridden spend limits by their API names
	// (cost_per_minute, cost_per_hour, cost_per_day), amounts of US
	// dollars as decimal strings (see Dollars); a nil one removes the
	// tier's limit for the user.
	Spend map[string]*string
	// TimeZone (an IANA name such as "Europe/Berlin") and BillingAnchor
	// (a day, 1 to 31) say where the user's own billing periods fall;
	// empty and 0 keep the account's, else the service's defaults.
	TimeZone      string
	BillingAnchor int
	Note          string
	// UpdatedAt is when the record was last changed; a put ignores it.
	UpdatedAt time.Time
}

// userWire is a User as the API writes it: the tier null when there is
// none.
type userWire struct {
	UserID    string      `json:"user_id"`
	Tier      *string     `json:"tier"`
	Account   string      `json:"account,omitempty"`
	Limits    limitValues `json:"limits"`
	TimeZone  string      `json:"time_zone,omitempty"`
	Anchor    int         `json:"billing_anchor,omitempty"`
	Note      string      `json:"note"`
	UpdatedAt *time.Time  `json:"updated_at,omitempty"`
}

func (w *userWire) user() User {
	u := User{UserID: w.UserID, Account: w.Account, Limits: w.Limits.counts, Spend: w.Limits.spend, Note: w.Note, TimeZone: w.TimeZone, BillingAnchor: w.Anchor}
	if w.Tier != nil {
		u.Tier = *w.Tier
	}
	if w.UpdatedAt != nil {
		u.UpdatedAt = *w.UpdatedAt
	}
	return u
}

// Limit returns a pointer to v, for User.Limits.
func Limit(v int64) *int64 { return &v }

// PutUser creates or replaces u.UserID's record and returns it as stored
// and whether it was created. The change applies to the very next check.
// A tier or an account that does not exist is refused (400) and changes
// nothing.
func (c *Client) PutUser(ctx context.Context, u User) (User, bool, error) {
	in := userWire{UserID: u.UserID, Account: u.Account, Limits: limitValues{u.Limits, u.Spend}, Note: u.Note, TimeZone: u.TimeZone, Anchor: u.BillingAnchor}
	if u.Tier != "" {
		in.Tier = &u.Tier
	}
	var out userWire
	status, err := c.do(ctx, http.MethodPut, "/v1/users/"+url.PathEscape(u.UserID), c.adminToken, in, &out,
		http.StatusOK, http.StatusCreated)
	return out.user(), status == http.StatusCreated, err
}

// User returns userID's record; a user with none is an *Error with status
// 404.
func (c *Client) User(ctx context.Context, userID string) (User, error) {
	var out userWire
	_, err := c.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(userID), c.adminToken, nil, &out, http.StatusOK)
	return out.user(), err
}

// DeleteUser removes userID's record (not their requests); a user with none
// is an *Error with status 404.
func (c *Client) DeleteUser(ctx context.Context, userID string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(userID), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

// ListUsers returns up to limit records (0: the service's default of 100)
// whose user ids sort after after, ordered by user id, and the after of the
// next page, empty on the last.
func (c *Client) ListUsers(ctx context.Context, after string, limit int) (users []User, next string, err error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/users"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Users []userWire `json:"users"`
		Next  *string    `json:"next"`
	}
	if _, err := c.do(ctx, http.MethodGet, path, c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, "", err
	}
	users = make([]User, len(out.Users))
	for i := range out.Users {
		users[i] = out.Users[i].user()
	}
	if out.Next != nil {
		next = *out.Next
	}
	return users, next, nil
}
