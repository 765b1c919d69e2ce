package api

import (
	"time"

	"github.com/go-json-experiment/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// pageAPI lends the admin page the JSON API's rules: its error table, its
// path parameters, its limit checks and its tier JSON, so that a form and a
// request are judged and answered alike. It implements web.API.
type pageAPI struct{}

var _ web.API = pageAPI{}

func (pageAPI) Status(err error) int {
	if status := statusOf[policy.ErrorCode(err)]; status != 0 {
		return status
	}
	return http.StatusInternalServerError
}

func (pageAPI) PathParam(c echo.Context, name string) (string, error) { return pathParam(c, name) }

func (pageAPI) ParseLimit(field, value string) (int64, error) {
	return parseLimit(field, []byte(value))
}

// TierJSON returns t as GET /v1/tiers/{name} answers it, without
// updated_at: the audit log on the tiers page shows when apart.
func (pageAPI) TierJSON(t policy.Tier) string {
	j := tierToJSON(t)
	j.UpdatedAt = time.Time{}
	b, err := json.Marshal(j)
	if err != nil {
		return ""
	}
	return string(b)
}
