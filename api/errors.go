package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// statusOf maps each domain error code to its HTTP status.
var statusOf = map[string]int{
	policy.EINVALID:      http.StatusBadRequest,
	policy.ENOTFOUND:     http.StatusNotFound,
	policy.ECONFLICT:     http.StatusConflict,
	policy.EUNAUTHORIZED: http.StatusUnauthorized,
	policy.EUNAVAILABLE:  http.StatusServiceUnavailable,
	policy.EINTERNAL:     http.StatusInternalServerError,
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Message string `json:"message"`
}

// handleError is the one place errors become responses. Only internal and
// storage failures are logged: the rest are the client's business.
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
		code := policy.ErrorCode(err)
		status, msg = statusOf[code], policy.ErrorMessage(err)
		if status == 0 {
			status = http.StatusInternalServerError
		}
	}
	if status >= 500 {
		s.log.LogAttrs(c.Request().Context(), slog.LevelError, "request failed",
			slog.String("id", c.Response().Header().Get(echo.HeaderXRequestID)),
			slog.String("method", c.Request().Method),
			slog.String("path", c.Request().URL.Path),
			slog.Int("status", status),
			slog.Any("err", err))
	}
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = c.JSON(status, errorBody{Message: msg})
	}
	if err != nil {
		s.log.Error("write error response", "err", err)
	}
}

func (s *Server) logPanic(c echo.Context, err error, stack []byte) error {
	s.log.Error("panic", "path", c.Request().URL.Path, "err", err, "stack", string(stack))
	return err
}

// accessLog logs one line per request: never a body, a query string or a
// header, so prompts and tokens stay out of logs.
func (s *Server) accessLog() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			req, res := c.Request(), c.Response()
			s.log.LogAttrs(req.Context(), slog.LevelInfo, "request",
				slog.String("id", res.Header().Get(echo.HeaderXRequestID)),
				slog.String("method", req.Method),
				slog.String("path", req.URL.Path),
				slog.Int("status", res.Status),
				slog.Int64("bytes", res.Size),
				slog.Duration("took", time.Since(start)),
				slog.String("remote", c.RealIP()),
			)
			return nil
		}
	}
}
