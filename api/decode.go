package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/policyguard/policyguard/policy"
)

// decodeJSON decodes the single JSON object in body into v and turns every
// failure into an EINVALID error that says what is wrong.
func decodeJSON(body io.Reader, v any, strict bool) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return policy.Errorf(policy.EINVALID, "request body is empty: send a JSON object")
	}
	if data[0] != '{' {
		return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
	}
	if err := checkJSON(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return policy.Errorf(policy.EINVALID, "request body must hold a single JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return policy.Errorf(policy.EINVALID, "malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return policy.Errorf(policy.EINVALID, "malformed JSON: unexpected end of body")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
		}
		return policy.Errorf(policy.EINVALID, "%s must be %s, not %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return policy.Errorf(policy.EINVALID, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return policy.Errorf(policy.EINVALID, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}
