package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPlainJSON(t *testing.T) {
	for _, tc := range []struct {
		body  string
		plain bool
	}{
		{`{}`, true},
		{` {"input_text":"Summarize this","context":{"user_id":"alice","user_tier":"pro","feature":"chat"}} `, true},
		{`{"a":[1,-2.5e+3,0,true,false,null,{"b":"ü \" \\ \/ \n"}],"c":{}}`, true},
		{`{"context":{"user_id":"zoë"}}`, true}, // UTF-8 in a value is fine
		{`{"a":1,"A":2}`, false},                // the same name to encoding/json
		{`{"a":{"b":1},"b":2}`, true},           // names repeat only across objects
		{`{"a":1,"a":2}`, false},
		{`{"\u0061":1}`, false},     // an escaped name
		{`{"a":"\u00e9"}`, false},   // any \u escape goes the long way
		{`{"ü":1}`, false},          // names beyond ASCII fold in more ways
		{`{"a":"\x"}`, false},       // not an escape
		{"{\"a\":\"\x01\"}", false}, // a control character
		{`{"a":01}`, false},         // a leading zero
		{`{"a":1.}`, false},         //
		{`{"a":.5}`, false},         //
		{`{"a":+1}`, false},         //
		{`{"a":1e}`, false},         //
		{`{"a":tru}`, false},        //
		{`{"a":1,}`, false},         // a trailing comma
		{`{"a":1} {}`, false},       // two values
		{`{"a":1}x`, false},         //
		{`[1]`, false},              // not an object
		{`{"a":` + strings.Repeat("[", 17) + strings.Repeat("]", 17) + `}`, false}, // deep
		{"{\"a\":\"\xff\"}", false}, // not UTF-8
		{`{"a":1`, false},           // cut short
	} {
		if got := plainJSON([]byte(tc.body)); got != tc.plain {
			t.Errorf("plainJSON(%q) = %v, want %v", tc.body, got, tc.plain)
		}
	}
}

// FuzzPlainJSON checks that plainJSON, the fast path of checkJSON, never
// passes a body that checkJSON's token walk or encoding/json would refuse.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{
		`{"input_text":"x","context":{"user_id":"alice","user_tier":"pro","feature":"chat"}}`,
		`{"a":[1,-2.5e+3,0,true,false,null,{"b":"ü \" \\ \/ \n"}],"c":{}}`,
		`{"a":1,"A":2}`, `{"a":{"a":{"a":1}}}`, `{"k":1,"K":2}`, `{"s":1,"S":1}`,
		`{"a":-0.0e-0}`, `{"a":"\ud800"}`, "\t{ } \r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !plainJSON(data) {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("plainJSON passed %q, which is not JSON", data)
		}
		if err := checkJSONTokens(data); err != nil {
			t.Fatalf("plainJSON passed %q, which checkJSON refuses: %v", data, err)
		}
	})
}
