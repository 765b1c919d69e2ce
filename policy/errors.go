package policy

import (
	"errors"
	"fmt"
)

// Error codes. Each names a class of failure that callers map to a response
// (HTTPStatus is the one table of their HTTP statuses).
const (
	EINVALID      = "invalid"      // the caller sent something malformed or out of range
	ENOTFOUND     = "not_found"    // the named thing does not exist
	ECONFLICT     = "conflict"     // the request contradicts the current state
	EUNAUTHORIZED = "unauthorized" // missing or wrong credentials
	EFORBIDDEN    = "forbidden"    // right credentials, too little a role
	EUNAVAILABLE  = "unavailable"  // storage failed; the answer is unknown, not "no"
	EINTERNAL     = "internal"     // a bug or an unexpected failure
)

// Error is a failure the domain knows how to describe to a caller. Refusals
// are not errors: a rate-limited or out-of-plan request is a Decision.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for a nil
// error and EINTERNAL for any other error.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain. Other
// errors are internal; their text may name files or SQL, so callers get a
// generic message instead.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// httpStatus is the HTTP status of each error code, the same for the JSON
// API and the admin page.
var httpStatus = map[string]int{
	EINVALID:      400, // Bad Request
	ENOTFOUND:     404, // Not Found
	ECONFLICT:     409, // Conflict
	EUNAUTHORIZED: 401, // Unauthorized
	EFORBIDDEN:    403, // Forbidden
	EUNAVAILABLE:  503, // Service Unavailable
	EINTERNAL:     500, // Internal Server Error
}

// HTTPStatus returns the HTTP status a failure with err's code is answered
// with: 400 for EINVALID, 404 for ENOTFOUND, 409 for ECONFLICT, 401 for
// EUNAUTHORIZED, 403 for EFORBIDDEN, 503 for EUNAVAILABLE, and 500 for EINTERNAL and any error
// that is not an *Error.
func HTTPStatus(err error) int {
	if status := httpStatus[ErrorCode(err)]; status != 0 {
		return status
	}
	return 500
}
