package api

import "bytes"

// decodePlain fills r from data, a body plainJSON accepted, exactly as
// encoding/json would, but without reflection: every check's body comes
// this way, and decoding it through encoding/json cost about a tenth of
// the service's CPU. It handles what clients send (known fields holding
// strings or null, a context object, any other fields) and reports false,
// leaving r alone, for anything else, such as a known field holding a
// number, or a name that matches a field only when letter case is ignored:
// encoding/json then decodes the body and says what is wrong.
func (r *checkRequest) decodePlain(data []byte) bool {
	var out checkRequest
	p := plainParser{data: data}
	ok := p.members(func(key []byte) bool {
		switch string(key) {
		case "input_text":
			return p.stringInto(&out.InputText)
		case "context":
			return p.contextInto(&out.Context)
		}
		if bytes.EqualFold(key, []byte("input_text")) || bytes.EqualFold(key, []byte("context")) {
			return false
		}
		return p.value(1)
	})
	if ok {
		*r = out
	}
	return ok
}

// contextInto reads the value at p into c: an object, or null, which
// leaves c as it is.
func (p *plainParser) contextInto(c *checkContext) bool {
	if p.literal("null") {
		return true
	}
	return p.members(func(key []byte) bool {
		switch string(key) {
		case "user_id":
			return p.stringInto(&c.UserID)
		case "user_tier":
			return p.stringInto(&c.UserTier)
		case "feature":
			return p.stringInto(&c.Feature)
		}
		for _, name := range [...]string{"user_id", "user_tier", "feature"} {
			if bytes.EqualFold(key, []byte(name)) {
				return false
			}
		}
		return p.value(2)
	})
}

// stringInto reads the value at p into s: a string, or null, which leaves
// s as it is (as encoding/json does). Anything else is reported false.
func (p *plainParser) stringInto(s *string) bool {
	if p.literal("null") {
		return true
	}
	raw, ok := p.str(false)
	if !ok {
		return false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		*s = string(raw)
		return true
	}
	// plainJSON allows only one-letter escapes: no \u.
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = raw[i]
		}
		b = append(b, c)
	}
	*s = string(b)
	return true
}
