package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Account is an organization's subscription: the plan (a tier) its
// members are checked under when their records assign none, and the
// pooled limits every member's check must also pass, counted over the
// requests, tokens and open calls of all its members.
type Account struct {
	AccountID string `json:"account_id"`
	// Tier names the account's plan, whose Account holds the pooled
	// limits.
	Tier string `json:"tier"`
	// Limits replaces the plan's pooled limits by their API names
	// (requests_per_minute, ..., max_concurrent): a limit left out keeps
	// the plan's, and a nil one removes it for the account.
	Limits map[string]*int64 `json:"-"`
	// Spend replaces the plan's pooled spend limits by their API names
	// (cost_per_minute, cost_per_hour, cost_per_day), amounts of US
	// dollars as decimal strings (see Dollars): one left out keeps the
	// plan's, and a nil one removes it for the account.
	Spend map[string]*string `json:"-"`
	// TimeZone (an IANA name such as "Europe/Berlin") and BillingAnchor
	// (a day, 1 to 31) say where the pool's billing periods fall, and its
	// members' unless their records say otherwise; empty and 0 keep the
	// service's defaults.
	TimeZone      string `json:"time_zone,omitempty"`
	BillingAnchor int    `json:"billing_anchor,omitempty"`
	Note          string `json:"note"`
	// UpdatedAt is when the account was last changed; a put ignores it.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// accountWire is an Account as the API writes it: Limits and Spend are
// one object.
type accountWire struct {
	plainAccount
	Limits limitValues `json:"limits"`
}

type plainAccount Account

// MarshalJSON implements json.Marshaler.
func (a Account) MarshalJSON() ([]byte, error) {
	return json.Marshal(accountWire{plainAccount(a), limitValues{a.Limits, a.Spend}})
}

// UnmarshalJSON implements json.Unmarshaler.
func (a *Account) UnmarshalJSON(data []byte) error {
	var w accountWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*a = Account(w.plainAccount)
	a.Limits, a.Spend = w.Limits.counts, w.Limits.spend
	return nil
}

// AccountState is the pooled state of a member's account after a check,
// in the shape of the user's own.
type AccountState struct {
	// ID is the account the check drew on.
	ID      string         `json:"id"`
	Windows AccountWindows `json:"windows"`
	// Concurrency is the members' calls in flight against the pooled
	// max_concurrent, counting this one when admitted; nil when the pool
	// sets none.
	Concurrency *Concurrency `json:"concurrency"`
}

// AccountWindows is an account's pooled state in each rolling window.
type AccountWindows struct {
	Minute AccountWindow `json:"minute"`
	Hour   AccountWindow `json:"hour"`
	Day    AccountWindow `json:"day"`
	// Month is the account's billing period; nil unless the pooled
	// limits limit months.
	Month *MonthWindow `json:"month"`
}

// AccountWindow is one pooled window's state.
type AccountWindow struct {
	// Limit is the pooled window's ceiling (the minute's includes the
	// pooled burst); nil when the pooled limits set none.
	Limit *int64 `json:"limit"`
	// Remaining is how many more requests the pooled window admits; nil
	// when it has no ceiling.
	Remaining *int64 `json:"remaining"`
	// Reset is the whole seconds until the window next frees a slot.
	Reset int64 `json:"reset"`
	// Tokens is the window's pooled tokens; nil unless the pooled limits
	// limit them.
	Tokens *WindowTokens `json:"tokens"`
	// Cost is the window's pooled spend; nil unless the pooled limits
	// limit it.
	Cost *WindowCost `json:"cost"`
}

// AccountUsage is an account's pooled requests, tokens and calls, in the
// shape of a user's Usage.
type AccountUsage struct {
	AccountID string `json:"account_id"`
	// Tier is the account's plan.
	Tier string `json:"tier"`
	// Limits are the pooled limits in force: the plan's, with the
	// account's overrides.
	Limits Limits `json:"limits"`
	// Windows holds each pooled window; Limit, Remaining and Reset are
	// set only for a window whose requests Limits limit, and the tokens'
	// only for a window whose tokens they limit.
	Windows struct {
		Minute UsageWindow `json:"minute"`
		Hour   UsageWindow `json:"hour"`
		Day    UsageWindow `json:"day"`
		Month  *UsageMonth `json:"month"`
	} `json:"windows"`
	// CallsInFlight is the members' calls open now.
	CallsInFlight int64 `json:"calls_in_flight"`
	// Period is the pool's current billing period.
	Period Period `json:"period"`
}

// PutAccount creates or replaces a.AccountID and returns it as stored and
// whether it was created. An unknown tier, or pooled limits that cannot
// all bind, is an *Error with status 400 and changes nothing.
func (c *Client) PutAccount(ctx context.Context, a Account) (Account, bool, error) {
	a.UpdatedAt = time.Time{}
	var out Account
	status, err := c.do(ctx, http.MethodPut, accountPath(a.AccountID), c.adminToken, a, &out,
		http.StatusOK, http.StatusCreated)
	return out, status == http.StatusCreated, err
}

// Account returns the account named id; an unknown one is an *Error with
// status 404.
func (c *Client) Account(ctx context.Context, id string) (Account, error) {
	var out Account
	_, err := c.do(ctx, http.MethodGet, accountPath(id), c.adminToken, nil, &out, http.StatusOK)
	return out, err
}

// Accounts returns up to limit accounts (0: the service's default of 100)
// whose ids sort after after, ordered by id, and the after of the next
// page, empty on the last.
func (c *Client) Accounts(ctx context.Context, after string, limit int) (accounts []Account, next string, err error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/accounts"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Accounts []Account `json:"accounts"`
		Next     *string   `json:"next"`
	}
	if _, err := c.do(ctx, http.MethodGet, path, c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, "", err
	}
	if out.Next != nil {
		next = *out.Next
	}
	return out.Accounts, next, nil
}

// DeleteAccount removes the account named id, not its pooled requests. An
// account that user records still name is an *Error with status 409,
// whose message says how many; an unknown one 404.
func (c *Client) DeleteAccount(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, accountPath(id), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

// AccountUsage returns the pooled windows, tokens and open calls of the
// account named id against its pooled limits.
func (c *Client) AccountUsage(ctx context.Context, id string) (AccountUsage, error) {
	var out AccountUsage
	_, err := c.do(ctx, http.MethodGet, accountPath(id)+"/usage", c.adminToken, nil, &out, http.StatusOK)
	return out, err
}

// AccountPeriods returns the pooled billing periods of the account named
// id, as UserPeriods.
func (c *Client) AccountPeriods(ctx context.Context, id string, before time.Time, limit int) (Periods, error) {
	return c.periods(ctx, accountPath(id)+"/usage/periods", before, limit)
}

// ForgetAccountUsage deletes the pooled requests, tokens and calls of the
// account named id: its pooled windows start afresh, its members' own
// windows stay as they are.
func (c *Client) ForgetAccountUsage(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, accountPath(id)+"/usage", c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

func accountPath(id string) string { return "/v1/accounts/" + url.PathEscape(id) }
