package api

import (
	"bytes"
	"unicode/utf8"
)

// plainJSON reports whether data is certainly a body checkJSONTokens lets pass:
// one JSON object, valid UTF-8, at most plainMaxDepth levels deep, whose
// keys are ASCII without escapes and unique ignoring ASCII case, with no
// \u escape anywhere. That is what clients send, and it is decided in one
// pass that allocates nothing. Anything else, well-formed or not, is
// reported false, and checkJSONTokens then looks at it closely; so plainJSON
// may say false to a good body, never true to one checkJSONTokens refuses.
func plainJSON(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	p := plainParser{data: data}
	p.space()
	if p.i >= len(p.data) || p.data[p.i] != '{' || !p.value(0) {
		return false
	}
	p.space()
	return p.i == len(p.data)
}

const (
	plainMaxDepth = 16 // well under MaxJSONDepth
	plainMaxKeys  = 64 // names held at once for the duplicate check
)

type plainParser struct {
	data []byte
	i    int
	// keys holds the names of the objects being read, innermost last.
	keys  [plainMaxKeys][]byte
	nkeys int
}

func (p *plainParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value reads one value at nesting depth (0 for the top level).
func (p *plainParser) value(depth int) bool {
	if p.i >= len(p.data) {
		return false
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return depth < plainMaxDepth && p.object(depth+1)
	case c == '[':
		return depth < plainMaxDepth && p.array(depth+1)
	case c == '"':
		_, ok := p.str(false)
		return ok
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.number()
	}
}

func (p *plainParser) object(depth int) bool {
	first := p.nkeys
	defer func() { p.nkeys = first }()
	return p.members(func(key []byte) bool {
		if p.nkeys == plainMaxKeys {
			return false
		}
		for _, k := range p.keys[first:p.nkeys] {
			if bytes.EqualFold(k, key) {
				return false
			}
		}
		p.keys[p.nkeys] = key
		p.nkeys++
		return p.value(depth)
	})
}

// members reads the object at p, calling member for each name with p at the
// start of its value; member reads the value. It reports false when p is
// not at an object or member does.
func (p *plainParser) members(member func(key []byte) bool) bool {
	p.space()
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		key, ok := p.str(true)
		if !ok {
			return false
		}
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		if !member(key) {
			return false
		}
		if done, ok := p.separator('}'); !ok || done {
			return ok
		}
	}
}

func (p *plainParser) array(depth int) bool {
	p.i++ // [
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return true
	}
	for {
		p.space()
		if !p.value(depth) {
			return false
		}
		if done, ok := p.separator(']'); !ok || done {
			return ok
		}
	}
}

// str reads a string and returns its contents. A key must be ASCII without
// escapes; no string may hold a \u escape.
func (p *plainParser) str(key bool) ([]byte, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return nil, false
	}
	p.i++
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			return s, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if key || p.i+1 >= len(p.data) {
				return nil, false
			}
			switch p.data[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			default: // \u, or not an escape at all
				return nil, false
			}
		case c >= utf8.RuneSelf && key:
			return nil, false
		default:
			p.i++
		}
	}
	return nil, false
}

func (p *plainParser) literal(lit string) bool {
	if !bytes.HasPrefix(p.data[p.i:], []byte(lit)) {
		return false
	}
	p.i += len(lit)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *plainParser) number() bool {
	if p.i < len(p.data) && p.data[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.data) && p.data[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return false
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return false
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

func (p *plainParser) digits() int {
	n := 0
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// separator reads what follows a member of an object or an element of an
// array: a comma (more follow) or the closing byte (done). ok is false for
// anything else.
func (p *plainParser) separator(closing byte) (done, ok bool) {
	p.space()
	if p.i >= len(p.data) {
		return false, false
	}
	switch p.data[p.i] {
	case ',':
		p.i++
		return false, true
	case closing:
		p.i++
		return true, true
	default:
		return false, false
	}
}
