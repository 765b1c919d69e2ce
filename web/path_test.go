package web_test

import (
	"net/http"
	"strings"
	"testing"
)

// A tier's name in a path is read unescaped, however the browser escaped
// it: Echo routes such a path on its raw form and leaves the parameter
// escaped.
func TestAdminPagePathEscapes(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	doc := parsePage(t, b.get("/admin/tiers/fr%65e"), http.StatusOK)
	if !strings.Contains(doc.raw, "<title>Edit tier free") {
		t.Errorf("/admin/tiers/fr%%65e is not the edit page of free:\n%s", doc.raw)
	}
	if rec := b.get("/admin/tiers/fr%65e/delete"); rec.Code != http.StatusOK {
		t.Errorf("/admin/tiers/fr%%65e/delete: status %d, want 200", rec.Code)
	}
	if rec := b.get("/admin/tiers/a%2Fb"); rec.Code != http.StatusNotFound {
		t.Errorf("/admin/tiers/a%%2Fb: status %d, want 404 (no tier a/b)", rec.Code)
	}
}
