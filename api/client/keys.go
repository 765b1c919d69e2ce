package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Key is a key of the model gateway, without its secret: the user it
// speaks for, or a service key, whose requests name their user.
type Key struct {
	ID string
	// UserID is the user the key speaks for; empty for a service key.
	UserID  string
	Service bool
	Note    string
	// CreatedAt is when the key was made.
	CreatedAt time.Time
	// LastUsedAt is when the key was last used, to the minute; zero until
	// first used. It is not set on the key CreateKey returns.
	LastUsedAt time.Time
}

// keyWire is a Key as the API writes it, with the secret of a key just
// made.
type keyWire struct {
	ID         string     `json:"id"`
	Key        string     `json:"key"`
	UserID     *string    `json:"user_id"`
	Service    bool       `json:"service"`
	Note       string     `json:"note"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

func (w *keyWire) key() Key {
	k := Key{ID: w.ID, Service: w.Service, Note: w.Note, CreatedAt: w.CreatedAt}
	if w.UserID != nil {
		k.UserID = *w.UserID
	}
	if w.LastUsedAt != nil {
		k.LastUsedAt = *w.LastUsedAt
	}
	return k
}

// CreateKey makes a gateway key for userID and returns it with its
// secret, the bearer token of the gateway's requests. The secret is shown
// this once: the service keeps only its hash.
func (c *Client) CreateKey(ctx context.Context, userID, note string) (Key, string, error) {
	return c.createKey(ctx, struct {
		UserID string `json:"user_id"`
		Note   string `json:"note"`
	}{userID, note})
}

// CreateServiceKey makes a service key, for a back end that calls the
// gateway on behalf of its own users and names the user in each request
// (X-Guard-User), and returns it with its secret, shown this once.
func (c *Client) CreateServiceKey(ctx context.Context, note string) (Key, string, error) {
	return c.createKey(ctx, struct {
		Service bool   `json:"service"`
		Note    string `json:"note"`
	}{true, note})
}

func (c *Client) createKey(ctx context.Context, in any) (Key, string, error) {
	var out keyWire
	if _, err := c.do(ctx, http.MethodPost, "/v1/keys", c.adminToken, in, &out, http.StatusCreated); err != nil {
		return Key{}, "", err
	}
	return out.key(), out.Key, nil
}

// Keys returns userID's keys, oldest first, without their secrets.
func (c *Client) Keys(ctx context.Context, userID string) ([]Key, error) {
	return c.keys(ctx, url.Values{"user_id": {userID}})
}

// ServiceKeys returns the service keys, oldest first, without their
// secrets.
func (c *Client) ServiceKeys(ctx context.Context) ([]Key, error) {
	return c.keys(ctx, url.Values{"service": {"true"}})
}

func (c *Client) keys(ctx context.Context, q url.Values) ([]Key, error) {
	var out struct {
		Keys []keyWire `json:"keys"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/keys?"+q.Encode(), c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	keys := make([]Key, len(out.Keys))
	for i := range out.Keys {
		keys[i] = out.Keys[i].key()
	}
	return keys, nil
}

// RevokeKey revokes the key with this id (Key.ID, not the secret): the
// gateway refuses its secret from the next request on. An unknown id is
// an *Error with status 404.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}
