package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
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
	data = trimJSONSpace(data)
	if len(data) == 0 {
		return policy.Errorf(policy.EINVALID, "request body is empty: send a JSON object")
	}
	if data[0] != '{' {
		return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
	}
	plain := plainJSON(data)
	if !plain {
		if err := checkJSONTokens(data); err != nil {
			return err
		}
	}
	if pd, ok := v.(plainDecoder); ok && plain && pd.decodePlain(data) {
		return nil
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
	if strict {
		return exactFieldNames(data, v)
	}
	return nil
}

// trimJSONSpace removes the white space JSON allows around a value: space,
// tab, CR and LF. bytes.TrimSpace would also remove what JSON refuses (\v,
// \f, U+00A0, U+2028, ...), so a body a strict proxy in front calls invalid
// would be read here as valid.
func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// plainDecoder is a body type that can decode a body plainJSON accepted
// without encoding/json. decodePlain must fill the value exactly as
// encoding/json would, or report false and leave it alone.
type plainDecoder interface {
	decodePlain(data []byte) bool
}

// exactFieldNames refuses a name that matches a field of v only when letter
// case is ignored. encoding/json accepts "Requests_Per_Day" for
// requests_per_day; a strict body must spell its fields as documented, or a
// client would believe a misspelling is valid.
func exactFieldNames(data []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	known := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			known[name] = true
		}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return jsonError(err)
	}
	names := make([]string, 0, len(top))
	for name := range top {
		if !known[name] {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		return policy.Errorf(policy.EINVALID, "unknown field %q", names[0])
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
