package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Message string `json:"message"`
}

// handleError is the one place errors become responses, with the status
// policy.HTTPStatus gives a domain error. Only internal and storage
// failures are logged: the rest are the client's business.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, msg := http.StatusInternalServerError, "internal error"
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		status = he.Code
		msg = http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok {
			msg = m
		}
		if he.Code == http.StatusRequestEntityTooLarge {
			msg = fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes)
		}
	default:
		status, msg = policy.HTTPStatus(err), policy.ErrorMessage(err)
	}
	if status >= 500 {
		s.logRequest(c, slog.LevelError, "request failed", slog.Int("status", status), slog.Any("err", err))
	}
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = c.JSON(status, errorBody{Message: msg})
	}
	if err != nil {
		s.logRequest(c, slog.LevelError, "write error response", slog.Any("err", err))
	}
}

func (s *Server) logPanic(c echo.Context, err error, stack []byte) error {
	s.logRequest(c, slog.LevelError, "panic", slog.Any("err", err), slog.String("stack", string(stack)))
	return err
}

// logRequest writes a line about request c. Like the access log line, it
// carries the request id, so every line about one request can be found
// from the X-Request-Id its client saw.
func (s *Server) logRequest(c echo.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	req := c.Request()
	s.log.LogAttrs(req.Context(), level, msg, append([]slog.Attr{
		slog.String("id", c.Response().Header().Get(echo.HeaderXRequestID)),
		slog.String("method", req.Method),
		slog.String("path", policy.RedactKeySecrets(req.URL.Path)),
	}, attrs...)...)
}
