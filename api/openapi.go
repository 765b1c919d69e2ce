package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPI is the OpenAPI 3.1 description of every route but the admin page.
// A test compares it with the routes the server registers and validates real
// answers against its schemas, so neither can drift from the other.
//
//go:embed openapi.yaml
var openAPI []byte

func (s *Server) handleOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", openAPI)
}
