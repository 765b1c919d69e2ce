package gateway

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/policyguard/policyguard/api/internal/jsonmsg"
	"github.com/policyguard/policyguard/policy"
)

// callBody is what the gateway reads of a metered call's body.
type callBody struct {
	model  string
	stream bool
	// outputCap is the largest output cap the body sets
	// (max_completion_tokens, max_tokens, max_output_tokens); -1 when it
	// sets none.
	outputCap int64
	// choices is how many completions are made at once (n, best_of),
	// each with its own output: at least 1.
	choices int64
	// media counts the parts that bring content the body only refers to
	// or encodes (images, audio, files, documents); tools counts the
	// tools given.
	media, tools int64
	// includeUsage reports whether the client asked for usage in a
	// stream (stream_options.include_usage).
	includeUsage bool
}

// Allowances of the prompt bound for what costs tokens beyond its bytes.
const (
	// mediaTokens is reserved for each image, audio clip, file or
	// document part: a high-detail image is at most about 1,600 tokens
	// on the APIs of both protocols.
	mediaTokens = 2048
	// toolTokens is reserved for each tool: a provider wraps tools in
	// a system prompt of its own (Anthropic's tool use adds about 350
	// tokens, its computer-use tool about 700, to a short definition).
	toolTokens = 1024
	// maxChoices bounds n and best_of, as the upstreams do.
	maxChoices = 128
)

// mediaTypes are the part types, across both protocols, whose tokens the
// body does not hold as text: {"type": "image_url", ...} and the like.
var mediaTypes = map[string]bool{
	"image_url": true, "input_image": true, "image": true,
	"input_audio": true, "file": true, "input_file": true, "document": true,
}

// readCallBody reads the members of a metered call's body that the
// gateway needs, and counts the parts that cost more than their bytes. A
// body that is not one JSON object, names a member twice, or names one
// the gateway reads in another letter case (which an upstream might read
// otherwise than the gateway) is EINVALID.
func readCallBody(body []byte) (callBody, error) {
	cb := callBody{outputCap: -1, choices: 1}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return cb, policy.Errorf(policy.EINVALID, "request body must be a JSON object")
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			break
		}
		n := name.String()
		if err := caseVariant(n, readNames); err != nil {
			return cb, err
		}
		switch n {
		case "model":
			v, err := dec.ReadValue()
			if err != nil {
				return cb, bodyError(body, err)
			}
			if v.Kind() != '"' {
				return cb, policy.Errorf(policy.EINVALID, "model must be a string")
			}
			_ = json.Unmarshal(v, &cb.model)
		case "stream":
			v, err := dec.ReadValue()
			if err != nil {
				return cb, bodyError(body, err)
			}
			cb.stream = v.Kind() == 't'
		case "max_completion_tokens", "max_tokens", "max_output_tokens", "n", "best_of":
			v, err := dec.ReadValue()
			if err != nil {
				return cb, bodyError(body, err)
			}
			// As a number of any spelling: an upstream that validates
			// loosely takes 1e3 or 1000.0 for 1000.
			f, err := strconv.ParseFloat(string(v), 64)
			if v.Kind() != '0' || err != nil || f < 0 || f != math.Trunc(f) {
				continue // the upstream refuses it; nothing to reserve
			}
			k := int64(min(f, float64(policy.MaxLimit)))
			if n == "n" || n == "best_of" {
				cb.choices = max(cb.choices, min(k, maxChoices))
			} else {
				cb.outputCap = max(cb.outputCap, min(k, policy.MaxLimit))
			}
		case "stream_options":
			v, err := dec.ReadValue()
			if err != nil {
				return cb, bodyError(body, err)
			}
			if v.Kind() == '{' {
				var opts map[string]jsontext.Value
				if err := json.Unmarshal(v, &opts); err != nil {
					return cb, bodyError(body, err)
				}
				for name, v := range opts {
					if err := caseVariant(name, streamOptionNames); err != nil {
						return cb, err
					}
					if name == "include_usage" {
						cb.includeUsage = v.Kind() == 't'
					}
				}
			}
		case "tools":
			if dec.PeekKind() == '[' {
				depth := dec.StackDepth()
				if _, err := dec.ReadToken(); err != nil {
					return cb, bodyError(body, err)
				}
				for dec.PeekKind() != ']' && dec.PeekKind() != 0 {
					cb.tools++
					if err := cb.countMedia(dec); err != nil {
						return cb, bodyError(body, err)
					}
				}
				if _, err := dec.ReadToken(); err != nil || dec.StackDepth() != depth {
					return cb, bodyError(body, err)
				}
				continue
			}
			fallthrough
		default:
			if err := cb.countMedia(dec); err != nil {
				return cb, bodyError(body, err)
			}
		}
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return cb, bodyError(body, err)
	}
	if _, err := dec.ReadToken(); err == nil {
		return cb, policy.Errorf(policy.EINVALID, "request body must hold a single JSON object")
	}
	return cb, nil
}

// The names the gateway reads, at the top level of a call's body and in
// its stream_options.
var (
	readNames = []string{"model", "stream", "stream_options", "max_completion_tokens", "max_tokens",
		"max_output_tokens", "n", "best_of"}
	streamOptionNames = []string{"include_usage"}
)

// caseVariant returns an EINVALID error when name differs only in letter
// case from one of names: an upstream that matches names ignoring case
// (Go's encoding/json does) would read it as that one, and the gateway
// would have checked another model or output cap than the one called.
// /v1/check refuses such names as duplicates too.
func caseVariant(name string, names []string) error {
	for _, n := range names {
		if name != n && strings.EqualFold(name, n) {
			return policy.Errorf(policy.EINVALID, "duplicate key %s in the request body: names that differ only in case count as the same, and the gateway reads %s", policy.Quote(name), policy.Quote(n))
		}
	}
	return nil
}

// countMedia reads the next value of dec and counts the media parts in
// it: the objects whose "type" names a media type.
func (cb *callBody) countMedia(dec *jsontext.Decoder) error {
	depth := dec.StackDepth()
	typed := false // the token before was the name "type"
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if tok.Kind() == '"' {
			kind, length := dec.StackIndex(dec.StackDepth())
			switch s := tok.String(); {
			case kind == '{' && length%2 == 1: // a name
				typed = s == "type"
				continue
			case typed && mediaTypes[s]:
				cb.media++
			}
		}
		typed = false
		if dec.StackDepth() == depth {
			return nil
		}
	}
}

// bodyError words a failure to read a call's body.
func bodyError(body []byte, err error) error {
	if err == nil {
		return policy.Errorf(policy.EINVALID, "request body must be a JSON object")
	}
	return jsonmsg.Error(body, err)
}

// reservation returns the tokens a call with this body of size bytes may
// use: an upper bound of its prompt's tokens (Input) and of its output
// (Output). A spend limit reserves the first at the model's input price
// and the second at its output price.
//
// The prompt's bound is the body's length in bytes. Every token of
// text the models read is at least one byte of UTF-8 (the tokenizers of
// both protocols work on bytes), the JSON around the text (quotes, names,
// escapes) only adds bytes, and so do numbers: an array of token ids
// spends at least two bytes on each. To it are added allowances for what
// costs tokens beyond its bytes: mediaTokens for each image, audio, file
// or document part (a high-detail image costs at most about 1,600
// tokens, however few bytes its URL or its encoding takes) and toolTokens
// for each tool. What a body only refers to and the provider reads
// itself (previous_response_id, a stored prompt, a file's pages, a
// search's results) is bounded by nothing in the body: for those calls
// the reservation is an estimate, and the settle, which counts what the
// upstream reports, is exact.
//
// The output, when withOutput (each protocol says which routes have
// one), is the largest output cap the body sets, or maxOutput when it
// sets none, for each of n (or best_of) choices.
// The sum is at most policy.MaxLimit.
func (cb *callBody) reservation(size int, withOutput bool, maxOutput int64) policy.TokenUsage {
	var u policy.TokenUsage
	u.Input = min(int64(size)+cb.media*mediaTokens+cb.tools*toolTokens, policy.MaxLimit)
	if withOutput {
		out := cb.outputCap
		if out < 0 {
			out = maxOutput
		}
		u.Output = min(out*cb.choices, policy.MaxLimit-u.Input)
	}
	return u
}
