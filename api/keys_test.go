package api_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

type createdKey struct {
	ID        string  `json:"id"`
	Key       string  `json:"key"`
	UserID    *string `json:"user_id"`
	Service   bool    `json:"service"`
	Note      string  `json:"note"`
	CreatedAt string  `json:"created_at"`
}

type listedKeys struct {
	Keys []map[string]any `json:"keys"`
}

// Every refusal of the key routes names its problem and makes no key.
func TestKeyRoutesRefuse(t *testing.T) {
	e := newEnv(t)
	for _, s := range []struct {
		name, method, path, body string
		admin                    bool
		status                   int
		want                     string // a fragment of the answer
	}{
		{"create without the admin token", "POST", "/v1/keys", `{"user_id":"alice"}`, false, 401, "missing or wrong admin token"},
		{"list without the admin token", "GET", "/v1/keys?user_id=alice", "", false, 401, "missing or wrong admin token"},
		{"revoke without the admin token", "DELETE", "/v1/keys/key_AAAAAAAAAAAA", "", false, 401, "missing or wrong admin token"},
		{"neither user nor service", "POST", "/v1/keys", `{"note":"x"}`, true, 400, "user_id is required, or service true for a service key"},
		{"service false alone", "POST", "/v1/keys", `{"service":false}`, true, 400, "user_id is required, or service true for a service key"},
		{"null user alone", "POST", "/v1/keys", `{"user_id":null}`, true, 400, "user_id is required, or service true for a service key"},
		{"both user and service", "POST", "/v1/keys", `{"user_id":"alice","service":true}`, true, 400, "a key has a user_id or is a service key (service true), not both"},
		{"empty user id", "POST", "/v1/keys", `{"user_id":""}`, true, 400, "user_id must not be empty"},
		{"long user id", "POST", "/v1/keys", `{"user_id":"` + strings.Repeat("u", 257) + `"}`, true, 400, "user_id must be at most 256 bytes"},
		{"control character in the user id", "POST", "/v1/keys", `{"user_id":"a\u0007b"}`, true, 400, "user_id must not contain control characters"},
		{"long note", "POST", "/v1/keys", `{"service":true,"note":"` + strings.Repeat("n", 1025) + `"}`, true, 400, "note must be at most 1024 bytes"},
		{"unknown member", "POST", "/v1/keys", `{"user_id":"alice","tier":"pro"}`, true, 400, `unknown field \"tier\"`},
		{"case matters", "POST", "/v1/keys", `{"User_ID":"alice"}`, true, 400, `unknown field \"User_ID\"`},
		{"service not a boolean", "POST", "/v1/keys", `{"service":"true"}`, true, 400, "service must be a boolean"},
		{"user id not a string", "POST", "/v1/keys", `{"user_id":7}`, true, 400, "user_id must be a string"},
		{"duplicate member", "POST", "/v1/keys", `{"user_id":"a","user_id":"b"}`, true, 400, "duplicate key"},
		{"empty body", "POST", "/v1/keys", ``, true, 400, "request body is empty"},
		{"not an object", "POST", "/v1/keys", `["alice"]`, true, 400, "must be a JSON object"},
		{"list of nobody", "GET", "/v1/keys", "", true, 400, "name whose keys to list: ?user_id=... for a user's, ?service=true for the service keys"},
		{"list of an empty user id", "GET", "/v1/keys?user_id=", "", true, 400, "name whose keys to list"},
		{"list of both", "GET", "/v1/keys?user_id=alice&service=true", "", true, 400, "name user_id or service=true, not both"},
		{"list with service false", "GET", "/v1/keys?service=false", "", true, 400, "service must be true"},
		{"list of a bad user id", "GET", "/v1/keys?user_id=a%00b", "", true, 400, "user_id must not contain control characters"},
		{"revoke an unknown key", "DELETE", "/v1/keys/key_AAAAAAAAAAAA", "", true, 404, `key \"key_AAAAAAAAAAAA\" does not exist`},
		{"revoke what is no key id", "DELETE", "/v1/keys/alice", "", true, 404, `key \"alice\" does not exist`},
		{"nothing was made", "GET", "/v1/keys?user_id=alice", "", true, 200, `{"keys":[]}`},
		{"no service key was made", "GET", "/v1/keys?service=true", "", true, 200, `{"keys":[]}`},
	} {
		rec := e.do(s.method, s.path, s.body, s.admin)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("%s: %s %s: %d %s, want %d with %s", s.name, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
	}
	if rec := e.do("POST", "/v1/keys", `{"user_id":"alice"}`, true); rec.Code != 201 {
		t.Fatalf("after the refusals, a key: %d %s", rec.Code, rec.Body)
	}
	req := `{"user_id":"alice"}`
	if rec := send(e.srv, "POST", "/v1/keys", req, map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "text/plain"}); rec.Code != 415 {
		t.Fatalf("a body that is not JSON by its type: %d %s, want 415", rec.Code, rec.Body)
	}
}

// A key made through the API is shown once with its secret, listed
// without it, authenticates until revoked and is refused from the next
// request on.
func TestKeyLifecycle(t *testing.T) {
	e := newEnv(t)
	svc := e.svc
	ctx := context.Background()

	rec := e.do("POST", "/v1/keys", `{"user_id":"alice","note":"alice's laptop"}`, true)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Fatalf("Cache-Control of the answer with the secret = %q, want no-store", got)
	}
	created := decode[createdKey](t, rec)
	if !regexp.MustCompile(`^pgk_[A-Za-z0-9_-]{32}$`).MatchString(created.Key) || !regexp.MustCompile(`^key_[A-Za-z0-9_-]{12}$`).MatchString(created.ID) {
		t.Fatalf("created %+v: want key pgk_ and 32 base64url characters, id key_ and 12", created)
	}
	if created.UserID == nil || *created.UserID != "alice" || created.Service || created.Note != "alice's laptop" || created.CreatedAt != "2026-03-01T12:00:00Z" {
		t.Fatalf("created = %+v", created)
	}
	if raw := decode[map[string]any](t, rec); len(raw) != 6 {
		t.Fatalf("the answer has %d members, want id, key, user_id, service, note, created_at: %s", len(raw), rec.Body)
	}

	rec = e.do("POST", "/v1/keys", `{"service":true,"note":"back end"}`, true)
	service := decode[createdKey](t, rec)
	if rec.Code != http.StatusCreated || service.UserID != nil || !service.Service || !strings.Contains(rec.Body.String(), `"user_id":null`) {
		t.Fatalf("create a service key: %d %s", rec.Code, rec.Body)
	}

	// Listed without secrets, never used yet.
	rec = e.do("GET", "/v1/keys?user_id=alice", "", true)
	want := `{"keys":[{"id":"` + created.ID + `","user_id":"alice","service":false,"note":"alice's laptop","created_at":"2026-03-01T12:00:00Z","last_used_at":null}]}`
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
		t.Fatalf("list: %d %s, want %s", rec.Code, rec.Body, want)
	}
	rec = e.do("GET", "/v1/keys?service=true", "", true)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"id":"`+service.ID+`","user_id":null,"service":true,"note":"back end"`) {
		t.Fatalf("list the service keys: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), service.Key) {
		t.Fatal("the list holds a secret")
	}

	// Used: the list says when.
	e.clock.Advance(90 * time.Second)
	if k, err := svc.Authenticate(ctx, created.Key); err != nil || k.ID != created.ID || k.UserID != "alice" {
		t.Fatalf("Authenticate = %+v, %v", k, err)
	}
	rec = e.do("GET", "/v1/keys?user_id=alice", "", true)
	if !strings.Contains(rec.Body.String(), `"last_used_at":"2026-03-01T12:01:30Z"`) {
		t.Fatalf("after a use: %s", rec.Body)
	}

	// Revoked: refused at once, gone from the list, and a second
	// revocation is a 404.
	if rec := e.do("DELETE", "/v1/keys/"+created.ID, "", true); rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	if _, err := svc.Authenticate(ctx, created.Key); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("after the revocation: %v, want EUNAUTHORIZED", err)
	}
	if rec := e.do("GET", "/v1/keys?user_id=alice", "", true); strings.TrimSpace(rec.Body.String()) != `{"keys":[]}` {
		t.Fatalf("after the revocation, the list: %s", rec.Body)
	}
	if rec := e.do("DELETE", "/v1/keys/"+created.ID, "", true); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "does not exist") {
		t.Fatalf("revoke again: %d %s", rec.Code, rec.Body)
	}
	if _, err := svc.Authenticate(ctx, service.Key); err != nil {
		t.Fatalf("the service key, not revoked: %v", err)
	}
}

// A key's secret is in the answer that made it and nowhere else: not in
// another answer, a header, a log line or /metrics, whatever route it is
// sent to and however.
func TestKeySecretOnlyInTheCreatedAnswer(t *testing.T) {
	e := newEnv(t, withJSONLog())
	svc, logs := e.svc, e.logs
	rec := e.do("POST", "/v1/keys", `{"user_id":"alice"}`, true)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	secret := decode[createdKey](t, rec).Key
	if _, err := svc.Authenticate(context.Background(), secret); err != nil {
		t.Fatal(err)
	}

	var answers strings.Builder
	collect := func(rec interface {
		Result() *http.Response
	}, body string) {
		res := rec.Result()
		answers.WriteString(body)
		for k, vs := range res.Header {
			answers.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
	}
	admin := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	for _, r := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"GET", "/v1/keys?user_id=alice", "", admin},
		{"POST", "/v1/keys", `{"user_id":"bob"}`, admin},
		{"GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + secret}},                             // the key is no admin token
		{"POST", "/v1/keys", `{"user_id":"` + secret + `"}`, map[string]string{"Authorization": "Bearer " + secret}}, // nor is it one here
		{"POST", "/v1/keys", `{"note":"` + secret + `"}`, admin},                                                     // refused: no user
		{"GET", "/v1/keys?user_id=alice&key=" + secret, "", admin},
		{"DELETE", "/v1/keys/" + secret, "", admin}, // the secret pasted for the id: 404, not repeated, not logged
		{"POST", "/v1/check", `{"context":{"user_id":"alice"}}`, map[string]string{"Authorization": "Bearer " + secret, "X-Api-Key": secret}},
		{"GET", "/metrics", "", nil},
	} {
		rec := send(e.srv, r.method, r.path, r.body, r.header)
		collect(rec, rec.Body.String())
	}
	// A storage failure, logged in full, still without the secret.
	e.store.Close()
	if _, err := svc.Authenticate(context.Background(), secret); policy.ErrorCode(err) != policy.EUNAVAILABLE || strings.Contains(err.Error(), secret) {
		t.Fatalf("Authenticate on a closed store: %v", err)
	}
	rec = send(e.srv, "GET", "/v1/keys?user_id="+secret[:8], "", admin)
	collect(rec, rec.Body.String())
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("list on a closed store: %d %s", rec.Code, rec.Body)
	}

	for where, text := range map[string]string{"answers": answers.String(), "log": logs.String()} {
		if strings.Contains(text, secret) || strings.Contains(text, secret[len(policy.KeyPrefix):]) {
			t.Errorf("%s hold the secret:\n%s", where, text)
		}
	}
	if !strings.Contains(logs.String(), `"path":"/v1/keys"`) {
		t.Fatalf("the log has no access lines to search:\n%s", logs)
	}
}
