package api

import (
	"bytes"
	"io"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api/internal/jsonmsg"
	"github.com/policyguard/policyguard/policy"
)

// Request bodies are read by github.com/go-json-experiment/json, which
// refuses what a proxy in front might read differently: invalid UTF-8,
// escapes of unpaired UTF-16 surrogates, a name given twice in one object,
// trailing data, and nesting deeper than its limit of 10,000 levels (the
// 1 MiB body limit bounds the work before that).
var (
	// checkBodyOptions read a check body. Names match fields ignoring
	// letter case, as encoding/json matched them (strings.EqualFold, so
	// "user-id" is not "user_id"), and two names that match one field are
	// a duplicate. Members no field takes are ignored, except at the top
	// level, where checkRequest collects them to refuse them.
	checkBodyOptions = json.JoinOptions(json.MatchCaseInsensitiveNames(true), jsonv1.MatchCaseSensitiveDelimiter(true))
	// strictOptions read tier bodies and tiers files: names match exactly,
	// and a member no field takes is refused, so that a misspelt limit is
	// an error rather than a limit left out.
	strictOptions = json.RejectUnknownMembers(true)
)

// jsonSerializer writes the answers of the server through the library,
// as Echo's JSONSerializer: c.JSON comes here. Check answers do not: they
// are on every check's path, and appendDecision writes the same bytes.
// Maps are written in key order, and text that is not UTF-8 is written as
// U+FFFD rather than failing the answer.
type jsonSerializer struct{}

var answerOptions = json.JoinOptions(json.Deterministic(true), jsontext.AllowInvalidUTF8(true))

func (jsonSerializer) Serialize(c echo.Context, v any, indent string) error {
	opts := answerOptions
	if indent != "" {
		opts = json.JoinOptions(opts, jsontext.WithIndent(indent))
	}
	if err := json.MarshalWrite(c.Response(), v, opts); err != nil {
		return err
	}
	_, err := c.Response().Write([]byte{'\n'})
	return err
}

// Deserialize reads a body as strictly as a tier body; no handler binds.
func (jsonSerializer) Deserialize(c echo.Context, v any) error {
	return readJSON(c.Request().Body, v, strictOptions)
}

// readJSON reads body, which must hold one JSON object, into v, and turns
// every failure into an EINVALID error that says what is wrong.
func readJSON(body io.Reader, v any, opts json.Options) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	return unmarshalObject(data, v, opts)
}

// unmarshalObject is readJSON for a body already read.
func unmarshalObject(data []byte, v any, opts json.Options) error {
	// Only the white space JSON allows: bytes.TrimSpace would also take
	// what JSON refuses (\v, \f, U+00A0, ...).
	switch start := bytes.TrimLeft(data, " \t\r\n"); {
	case len(start) == 0:
		return policy.Errorf(policy.EINVALID, "request body is empty: send a JSON object")
	case start[0] != '{':
		return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
	}
	if err := json.Unmarshal(data, v, opts); err != nil {
		return jsonmsg.Error(data, err)
	}
	return nil
}
