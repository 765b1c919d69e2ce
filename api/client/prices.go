package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Price is an entry of the price table, in dollars per million tokens as
// decimal strings ("0.15"), as the API writes them: exact to the
// picodollar, and never through a float64. Model is an exact name or a
// prefix ending in '*'; Upstream, when set, is the gateway upstream the
// entry is for alone. In PutPrices, an empty CacheRead or CacheWrite is the
// Input price.
type Price struct {
	Model      string `json:"model"`
	Upstream   string `json:"upstream,omitempty"`
	Input      string `json:"input"`
	Output     string `json:"output"`
	CacheRead  string `json:"cache_read,omitempty"`
	CacheWrite string `json:"cache_write,omitempty"`
}

// PriceVersion is a version of the price table: the whole table, in force
// from EffectiveFrom until a later version begins.
type PriceVersion struct {
	ID            int64     `json:"id"`
	EffectiveFrom time.Time `json:"effective_from"`
	CreatedAt     time.Time `json:"created_at"`
	// Source is how the version was made: "api", "admin", "import" or
	// "library".
	Source string  `json:"source"`
	Prices []Price `json:"prices"`
}

// PriceVersionInfo describes a version without its entries.
type PriceVersionInfo struct {
	ID            int64     `json:"id"`
	EffectiveFrom time.Time `json:"effective_from"`
	CreatedAt     time.Time `json:"created_at"`
	Source        string    `json:"source"`
	Entries       int       `json:"entries"`
	// InForce reports whether the version is the one in force now.
	InForce bool `json:"in_force"`
}

// PutPrices makes prices a new version of the price table, in force from
// effectiveFrom, or from now when it is zero (it may not be earlier than
// the service's now), and returns it as stored.
func (c *Client) PutPrices(ctx context.Context, effectiveFrom time.Time, prices []Price) (PriceVersion, error) {
	in := struct {
		EffectiveFrom *time.Time `json:"effective_from,omitempty"`
		Prices        []Price    `json:"prices"`
	}{Prices: prices}
	if in.Prices == nil {
		in.Prices = []Price{}
	}
	if !effectiveFrom.IsZero() {
		in.EffectiveFrom = &effectiveFrom
	}
	var out PriceVersion
	_, err := c.do(ctx, http.MethodPut, "/v1/prices", c.adminToken, in, &out, http.StatusCreated)
	return out, err
}

// Prices returns the version of the price table in force at t, or now when
// t is zero. With none in force it returns an *Error with status 404.
func (c *Client) Prices(ctx context.Context, t time.Time) (PriceVersion, error) {
	path := "/v1/prices"
	if !t.IsZero() {
		path += "?" + url.Values{"at": {t.Format(time.RFC3339Nano)}}.Encode()
	}
	var out PriceVersion
	_, err := c.do(ctx, http.MethodGet, path, c.adminToken, nil, &out, http.StatusOK)
	return out, err
}

// PriceVersions returns every version of the price table, newest first.
func (c *Client) PriceVersions(ctx context.Context) ([]PriceVersionInfo, error) {
	var out struct {
		Versions []PriceVersionInfo `json:"versions"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/prices/versions", c.adminToken, nil, &out, http.StatusOK)
	return out.Versions, err
}
