package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// MaxJSONDepth is how deeply the objects and arrays of a request body may
// nest.
const MaxJSONDepth = 64

// requireJSON refuses with 415 a request whose body is declared as anything
// but JSON, such as curl's default form type: the body would not be read
// as what its sender meant. A body with no Content-Type at all is read as
// JSON, for the simplest clients.
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ct := c.Request().Header.Get(echo.HeaderContentType)
		if ct == "" {
			return next(c)
		}
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != echo.MIMEApplicationJSON {
			return echo.NewHTTPError(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return echo.NewHTTPError(http.StatusUnsupportedMediaType, "Content-Type must be application/json with no charset or charset=utf-8")
		}
		return next(c)
	}
}

// crossSite judges requests by Sec-Fetch-Site, or else Origin against Host.
var crossSite = http.NewCrossOriginProtection()

// refuseCrossSite refuses with 403 a request a browser sends from a page of
// another site. Browsers send some requests to other sites without asking
// first (a form, or a fetch of a body with no type), so without this any
// page a user opened could spend quota on a service only their machine can
// reach. Clients that are not browsers send neither header and pass.
func refuseCrossSite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := crossSite.Check(c.Request()); err != nil {
			return echo.NewHTTPError(http.StatusForbidden, "cross-site requests from browsers are refused")
		}
		return next(c)
	}
}

// checkJSONTokens reports what encoding/json would let pass silently in a
// request body: bytes that are not UTF-8 and escapes of unpaired UTF-16
// surrogates (it would turn each into U+FFFD, so different user ids would
// count as one user), a name given twice in one object (it would keep the
// last, while a proxy in front may have read the first; names that differ
// only in letter case count as the same, because encoding/json matches them
// so), and nesting deeper than MaxJSONDepth. It also reports syntax errors,
// as decoding would. It walks the body token by token; plainJSON decides
// the bodies clients usually send in one pass first.
func checkJSONTokens(data []byte) error {
	if !utf8.Valid(data) {
		return policy.Errorf(policy.EINVALID, "request body must be UTF-8: JSON text is never anything else")
	}
	// Each open object or array; keys is nil for an array.
	type level struct {
		keys    map[string]bool
		wantKey bool
	}
	var stack []*level
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number too large for float64 is still valid JSON
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return jsonError(err)
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			key, _ := tok.(string) // the decoder allows only a string here
			folded := foldKey(key)
			if stack[n-1].keys[folded] {
				return policy.Errorf(policy.EINVALID, "duplicate key %s in the request body (names that differ only in case count as the same)", quoteJSONKey(key))
			}
			stack[n-1].keys[folded] = true
			stack[n-1].wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == MaxJSONDepth {
				return policy.Errorf(policy.EINVALID, "request body nests deeper than %d levels", MaxJSONDepth)
			}
			l := &level{}
			if tok == json.Delim('{') {
				l.keys, l.wantKey = map[string]bool{}, true
			}
			stack = append(stack, l)
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
	if esc, ok := unpairedSurrogate(data); ok {
		return policy.Errorf(policy.EINVALID, "request body escapes an unpaired UTF-16 surrogate (%s): not a character", esc)
	}
	return nil
}

// foldKey returns a form of k that is the same for every k' with
// bytes.EqualFold(k, k'), the comparison encoding/json matches names with.
func foldKey(k string) string {
	b := make([]rune, 0, len(k))
	for _, r := range k {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b = append(b, m)
	}
	return string(b)
}

// unpairedSurrogate returns the first \uXXXX escape in the strings of data,
// which must be valid JSON, that names half of a UTF-16 surrogate pair
// without the other half.
func unpairedSurrogate(data []byte) (string, bool) {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if data[i+1] != 'u' {
				i++ // a one-letter escape, perhaps of a quote or backslash
				continue
			}
			r := hexRune(data[i+2 : i+6])
			if utf16.IsSurrogate(r) {
				high := r < 0xdc00
				if !high || i+12 > len(data) || data[i+6] != '\\' || data[i+7] != 'u' ||
					utf16.DecodeRune(r, hexRune(data[i+8:i+12])) == unicode.ReplacementChar {
					return string(data[i : i+6]), true
				}
				i += 6 // the low half of the pair
			}
			i += 5
		}
	}
	return "", false
}

// hexRune decodes four hex digits, which valid JSON guarantees.
func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// quoteJSONKey quotes a key for a message, cut short so that a huge key
// cannot make a huge answer.
func quoteJSONKey(k string) string {
	const max = 64
	if len(k) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(k[cut]) {
			cut--
		}
		k = k[:cut] + "..."
	}
	b, _ := json.Marshal(k)
	return string(b)
}
