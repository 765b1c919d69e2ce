// Package jsonmsg words the failures of github.com/go-json-experiment/json
// on a request body for the client, the same for the API's bodies and the
// gateway's metered ones.
package jsonmsg

import (
	"errors"
	"io"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/policyguard/policyguard/policy"
)

// Error words a failure of json.Unmarshal on data for the client. It
// never copies the library's message whole: that may quote a JSON pointer
// thousands of levels long.
func Error(data []byte, err error) error {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		return syntaxError(data, syn)
	case errors.As(err, &sem) && sem.Err == json.ErrUnknownName:
		return policy.Errorf(policy.EINVALID, "unknown field %s", policy.Quote(sem.JSONPointer.LastToken()))
	case errors.As(err, &sem) && sem.JSONPointer != "":
		field := strings.ReplaceAll(strings.TrimPrefix(string(sem.JSONPointer), "/"), "/", ".")
		// A field of ours: its path is short and needs no quoting.
		return policy.Errorf(policy.EINVALID, "%s must be %s, not %s", field, goKind(sem), jsonKind(sem.JSONKind))
	}
	return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
}

func syntaxError(data []byte, e *jsontext.SyntacticError) error {
	msg, at := e.Err.Error(), int(e.ByteOffset)
	switch {
	case errors.Is(e.Err, jsontext.ErrDuplicateName):
		return policy.Errorf(policy.EINVALID, "duplicate key %s in the request body (for a check, names that differ only in case count as the same)", policy.Quote(e.JSONPointer.LastToken()))
	case msg == "invalid UTF-8":
		return policy.Errorf(policy.EINVALID, "request body must be UTF-8: JSON text is never anything else")
	case strings.HasPrefix(msg, "invalid surrogate pair") && at+6 <= len(data):
		return policy.Errorf(policy.EINVALID, "request body escapes an unpaired UTF-16 surrogate (%s): not a character", data[at:at+6])
	case msg == "exceeded max depth":
		return policy.Errorf(policy.EINVALID, "request body nests deeper than 10000 levels")
	case strings.HasSuffix(msg, "after top-level value") && at < len(data) && strings.IndexByte(`{["`, data[at]) >= 0:
		return policy.Errorf(policy.EINVALID, "request body must hold a single JSON object")
	case errors.Is(e.Err, io.ErrUnexpectedEOF):
		return policy.Errorf(policy.EINVALID, "malformed JSON: unexpected end of body")
	}
	return policy.Errorf(policy.EINVALID, "malformed JSON at byte %d: %s", at, msg)
}

// goKind names what a field takes, as a JSON client thinks of it.
func goKind(e *json.SemanticError) string {
	if e.GoType == nil {
		return "something else"
	}
	switch e.GoType.Kind().String() {
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	}
	return "a number"
}

// jsonKind names the kind of a JSON value, as encoding/json named it.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "something else"
}
