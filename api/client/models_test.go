package client_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/policyguard/policyguard/api/client"
)

// A tier's models go through the client as the API keeps them: nil for
// any model, an empty list for none, else the names; a bad name is the
// API's 400.
func TestClientTierModels(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	if pro, err := c.Tier(ctx, "pro"); err != nil || pro.Models != nil {
		t.Fatalf("seeded pro: models %#v, %v; want nil", pro.Models, err)
	}
	tier := client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(5), RequestsPerHour: client.Limit(50), RequestsPerDay: client.Limit(500)}}
	for _, models := range [][]string{{"gpt-4o-mini*", "o3"}, {}, nil} {
		tier.Models = models
		put, _, err := c.PutTier(ctx, tier)
		if err != nil {
			t.Fatalf("PutTier with models %#v: %v", models, err)
		}
		got, err := c.Tier(ctx, "team")
		if err != nil {
			t.Fatal(err)
		}
		for what, m := range map[string][]string{"PutTier": put.Models, "Tier": got.Models} {
			if (m == nil) != (models == nil) || fmt.Sprint(m) != fmt.Sprint(models) {
				t.Errorf("%s after putting models %#v: %#v", what, models, m)
			}
		}
	}
	tier.Models = []string{"gpt-4o", "*gpt"}
	_, _, err := c.PutTier(ctx, tier)
	wantError(t, "a wildcard before the end", err, http.StatusBadRequest, `models[1]: "*gpt" has a "*" before its end; "*" may only end a name`)
}
