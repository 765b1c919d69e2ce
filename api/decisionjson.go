package api

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/policyguard/policyguard/policy"
)

// decisionBuffers holds the buffers check answers are written into.
var decisionBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendDecisionJSON appends the body of a check answer for d to b, byte
// for byte what encoding/json's Encoder writes for decisionBody(d),
// newline included, without reflection: this body goes out with every
// check.
func appendDecisionJSON(b []byte, d *policy.Decision) []byte {
	res := decisionBody(d)
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, res.Allowed)
	b = append(b, `,"reason":`...)
	if res.Reason == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *res.Reason)
	}
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, res.RetryAfter, 10)
	b = append(b, `,"tier":`...)
	b = appendJSONString(b, res.Tier)
	b = append(b, `,"guardrail":`...)
	b = appendJSONString(b, res.Guardrail)
	b = append(b, `,"windows":{"minute":`...)
	b = appendWindowJSON(b, res.Windows.Minute)
	b = append(b, `,"hour":`...)
	b = appendWindowJSON(b, res.Windows.Hour)
	b = append(b, `,"day":`...)
	b = appendWindowJSON(b, res.Windows.Day)
	return append(b, "}}\n"...)
}

func appendWindowJSON(b []byte, w windowResponse) []byte {
	b = append(b, `{"limit":`...)
	b = strconv.AppendInt(b, w.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, w.Remaining, 10)
	b = append(b, `,"reset":`...)
	b = strconv.AppendInt(b, w.Reset, 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it. Plain ASCII is
// copied; anything encoding/json escapes (quotes, backslashes, control
// characters, <, > and &, bytes beyond ASCII) is left to encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil { // cannot happen for a string
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
