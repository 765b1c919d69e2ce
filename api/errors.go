package api

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
		slog.String("path", req.URL.Path),
	}, attrs...)...)
}

// requestID gives every request an id, answered in X-Request-Id and logged
// on each of its lines. An incoming X-Request-Id, such as a proxy's, is kept
// when it is at most 128 visible ASCII characters; anything else is replaced
// rather than copied into logs and answers. (Echo's RequestID middleware
// copies whatever it is sent.)
func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Response().Header()[echo.HeaderXRequestID] = []string{id}
		return next(c)
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns 32 random hex digits. The ids need to be unique, not
// secret, so the fast per-thread generator of math/rand/v2 serves.
func newRequestID() string {
	var b [32]byte
	const digits = "0123456789abcdef"
	for half, v := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for i := range 16 {
			b[half*16+i] = digits[v>>(60-4*i)&0xf]
		}
	}
	return string(b[:])
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
