package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// FuzzCheckBody sends any bytes as the body of a check. Whatever they are,
// the answer is one of the documented statuses with a JSON body, an error
// says what is wrong, and exactly the 200s that are not dry runs are
// recorded. encoding/json's reading of the body is the reference for what
// may be admitted: one object, whose top-level names are each one of the
// four fields in some letter case, with no tokens in context and a dry_run
// that is true or false. Its seed corpus is in testdata/fuzz/FuzzCheckBody.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"input_text":"hi","context":{"user_id":"alice","user_tier":"pro","feature":"search"}}`,
		`{"context":{"user_id":"a","user_id":"b"}}`,
		`{"context":{"user_id":"\ud800"}}`,
		`{"context":{"user_tier":"gold"}}`,
		`{"context":{"feature":"search"}}`,
		`{"context":null,"extra":[1,{"x":{}}]}`,
		`{"context":{"extra":[1,{"x":{}}]}}`,
		`{"user_id":"x","user_tier":"pro"}`,
		`{"User_ID":"x"}`,
		`{"context":{"tokens":5}}`,
		`{"tokens":5,"dry_run":true,"context":{"user_tier":"tiny"}}`,
		`{"DRY_RUN":false}`,
		`{"dry_run":"yes"}`,
		`{"to\u212aens":1}`,
		"{\"context\":{\"user_id\":\"\xff\"}}",
		`[]`, ``, `{`, `{"a":1}{"b":2}`,
	} {
		f.Add([]byte(seed))
	}
	e := newGuardEnv(f, api.Config{})
	e.putTier("tiny", `{"requests_per_minute":1,"requests_per_hour":2,"requests_per_day":3,"burst_allowance":0}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		e.clock.Advance(7 * time.Second) // windows fill and drain as the fuzzer goes
		before := e.requests.recorded.Load()
		rec := e.send(http.MethodPost, "/v1/check", string(body), nil)
		recorded := e.requests.recorded.Load() - before

		var answer map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("%d answer is not JSON: %q", rec.Code, rec.Body)
		}
		ref, refErr := referenceCheckBody(body)
		switch rec.Code {
		case http.StatusOK:
			// What was admitted is JSON by encoding/json's own reading,
			// UTF-8, and holds only what a check body may hold.
			if !json.Valid(body) || !utf8.Valid(body) {
				t.Fatalf("admitted a body that is not valid JSON text: %q", body)
			}
			if refErr != nil {
				t.Fatalf("admitted a body that %v: %q", refErr, body)
			}
			if want := int64(1 - b2i(ref.dryRun)); answer["allowed"] != true || recorded != want {
				t.Fatalf("200 with allowed=%v and %d recorded (dry run %v): %s", answer["allowed"], recorded, ref.dryRun, rec.Body)
			}
		case http.StatusTooManyRequests, http.StatusForbidden:
			if answer["allowed"] != false || recorded != 0 {
				t.Fatalf("%d with allowed=%v and %d recorded", rec.Code, answer["allowed"], recorded)
			}
			if refErr != nil {
				t.Fatalf("decided on a body that %v: %q", refErr, body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if msg, _ := answer["message"].(string); msg == "" || recorded != 0 {
				t.Fatalf("%d with message %q and %d recorded", rec.Code, msg, recorded)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

// checkBodyReading is what encoding/json reads in a check body.
type checkBodyReading struct {
	dryRun bool
}

// referenceCheckBody reads a check body with encoding/json, whose names
// match fields as strings.EqualFold does, and fails where the service must
// not decide: a body that is not an object, a top-level member other than
// input_text, context, tokens, model and dry_run, tokens inside context, or a
// dry_run other than true or false. It does not repeat the library's
// other refusals (duplicate names, bad UTF-8, types, ...).
func referenceCheckBody(body []byte) (checkBodyReading, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return checkBodyReading{}, fmt.Errorf("is not a JSON object (%v)", err)
	}
	var r checkBodyReading
	for name, v := range top {
		i := slices.IndexFunc([]string{"input_text", "context", "tokens", "dry_run", "model"}, func(f string) bool { return strings.EqualFold(name, f) })
		switch {
		case i < 0:
			return r, fmt.Errorf("has the top-level member %q", name)
		case i == 1:
			var context map[string]json.RawMessage
			if json.Unmarshal(v, &context) == nil {
				for inner := range context {
					if strings.EqualFold(inner, "tokens") {
						return r, fmt.Errorf("has %q in context", inner)
					}
				}
			}
		case i == 3:
			switch string(v) {
			case "true":
				r.dryRun = true
			case "false":
			default:
				return r, fmt.Errorf("has dry_run %s", v)
			}
		}
	}
	return r, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzTierPut sends any name and body to PUT /v1/tiers/{name}. A tier is
// stored only when the name and every field are valid, and then exactly as
// the body says; anything else is refused with a message and changes no
// tier. Its seed corpus is in testdata/fuzz/FuzzTierPut.
func FuzzTierPut(f *testing.F) {
	limits := `"requests_per_minute":3,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":1`
	for _, seed := range []struct{ name, body string }{
		{"team", `{` + limits + `,"features":["chat","search"],"description":"Team"}`},
		{"free", `{` + limits + `}`},
		{"Bad!", `{` + limits + `}`},
		{"x", `{"requests_per_minute":1.5,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`},
		{"x", `{"requests_per_minute":2147483648,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`},
		{"x", `{` + limits + `,"features":["*","*"]}`},
		{"x", `{` + limits + `,"models":["gpt-4o-mini*","o3"]}`},
		{"x", `{` + limits + `,"models":[]}`},
		{"x", `{` + limits + `,"models":null}`},
		{"x", `{` + limits + `,"models":["*gpt","a b",""]}`},
		{"x", `{` + limits + `,"name":"y"}`},
		{"x", `{` + limits + `,"requests_per_hour":5}`},
		{"x", `{` + limits + `,"description":"` + "\xff" + `"}`},
		{"x'; DROP TABLE tiers; --", `{` + limits + `}`},
		{"", `{}`},
	} {
		f.Add(seed.name, []byte(seed.body))
	}
	e := newGuardEnv(f, api.Config{})
	ctx := context.Background()
	original, err := e.svc.Tiers(ctx)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		before, err := e.svc.Tiers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec := e.send(http.MethodPut, "/v1/tiers/"+url.PathEscape(name), string(body), map[string]string{"Authorization": "Bearer " + adminToken})
		after, err := e.svc.Tiers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Code {
		case http.StatusOK, http.StatusCreated:
			if !policy.ValidTierName(name) {
				t.Fatalf("stored a tier named %q", name)
			}
			got, err := e.svc.Tier(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("stored an invalid tier: %v", err)
			}
			// Read the body independently: the stored limits are the ones
			// sent.
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(body, &raw); err != nil {
				t.Fatalf("stored a tier from a body encoding/json cannot read: %v", err)
			}
			for field, v := range map[string]int64{
				"requests_per_minute": got.Limits.Value(policy.RequestsPerMinute), "requests_per_hour": got.Limits.Value(policy.RequestsPerHour),
				"requests_per_day": got.Limits.Value(policy.RequestsPerDay), "burst_allowance": got.Limits.Value(policy.BurstAllowance),
			} {
				if sent, err := strconv.ParseInt(string(raw[field]), 10, 64); err != nil || sent != v {
					t.Fatalf("%s: sent %s, stored %d", field, raw[field], v)
				}
			}
			var models []string // nil when left out or null: any model
			if m, ok := raw["models"]; ok {
				if err := json.Unmarshal(m, &models); err != nil {
					t.Fatalf("models: stored from %s: %v", m, err)
				}
			}
			if (got.Models == nil) != (models == nil) || !slices.Equal(got.Models, models) {
				t.Fatalf("models: sent %s, stored %#v", raw["models"], got.Models)
			}
			restoreTiers(t, e, original)
		case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
			if message(rec) == "" {
				t.Fatalf("%d without a message", rec.Code)
			}
			if !sameTiers(before, after) {
				t.Fatalf("a refused PUT (%d %s) changed the tiers", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

// restoreTiers puts the tiers back as they were when the fuzzer started.
func restoreTiers(t *testing.T, e *guardEnv, original []policy.Tier) {
	t.Helper()
	ctx := context.Background()
	now, err := e.svc.Tiers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range now {
		i := slices.IndexFunc(original, func(o policy.Tier) bool { return o.Name == tier.Name })
		switch {
		case i < 0:
			err = e.svc.DeleteTier(ctx, tier.Name)
		case !sameTiers([]policy.Tier{tier}, original[i:i+1]):
			_, _, err = e.svc.PutTier(ctx, original[i])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sameTiers reports whether a and b hold the same tiers with the same
// limits, features and description.
func sameTiers(a, b []policy.Tier) bool {
	return slices.EqualFunc(a, b, func(x, y policy.Tier) bool {
		return x.Name == y.Name && policy.SameLimits(&x, &y)
	})
}
