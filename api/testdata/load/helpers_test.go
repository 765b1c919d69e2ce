package load

// The helpers the load benchmark shares with the module's top-level tests
// (main_helpers_test.go), copied: a package under testdata cannot import a
// test file, and these are a few lines each.

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
)

// token is the admin token of the services the benchmark starts.
const token = "main-test-token"

// goBuild builds the program in the package directory dir, relative to
// this one (the module's root "../../.." is the service), into the test's
// temporary directory as name.
func goBuild(t testing.TB, dir, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// dayCount returns the requests of user the service counts in its day
// window.
func dayCount(t *testing.T, url, user string) int {
	t.Helper()
	var u struct {
		Windows map[string]struct{ Count int } `json:"windows"`
	}
	getJSON(t, url+"/v1/usage/"+user, &u)
	return u.Windows["day"].Count
}

// getJSON reads the answer of an admin's GET of url into v; anything but
// a 200 fails the test.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, res.StatusCode, err)
	}
}
