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

// FuzzPlainJSON checks that plainJSON, the fast path of the body checks,
// never passes a body that checkJSONTokens or encoding/json would refuse,
// and that a check body decoded without encoding/json is exactly what
// encoding/json makes of it.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{
		`{"input_text":"x","context":{"user_id":"alice","user_tier":"pro","feature":"chat"}}`,
		`{"a":[1,-2.5e+3,0,true,false,null,{"b":"ü \" \\ \/ \n"}],"c":{}}`,
		`{"a":1,"A":2}`, `{"a":{"a":{"a":1}}}`, `{"k":1,"K":2}`, `{"s":1,"S":1}`,
		`{"a":-0.0e-0}`, `{"a":"\ud800"}`, "\t{ } \r\n",
		`{"input_text":null,"context":{"user_id":"a\tb\\c\"d","feature":null,"x":[{"user_id":1}]}}`,
		`{"context":{"USER_ID":"a"}}`, `{"Context":{}}`, `{"context":[]}`, `{"input_text":5}`,
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
			t.Fatalf("plainJSON passed %q, which checkJSONTokens refuses: %v", data, err)
		}
		fast := checkRequest{InputText: "untouched"}
		if !fast.decodePlain(data) {
			if fast != (checkRequest{InputText: "untouched"}) {
				t.Fatalf("decodePlain(%q) declined but changed the request to %+v", data, fast)
			}
			return
		}
		var slow checkRequest
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("decodePlain took %q, which encoding/json refuses: %v", data, err)
		}
		if fast != slow {
			t.Fatalf("decodePlain(%q) = %+v, encoding/json makes %+v", data, fast, slow)
		}
	})
}

// decodePlain handles the bodies clients send and declines the rest, which
// encoding/json then decodes and explains.
func TestCheckBodyDecodePlain(t *testing.T) {
	for _, tc := range []struct {
		body string
		want *checkRequest // nil: declined
	}{
		{`{}`, &checkRequest{}},
		{` {"input_text":"Summarize this","context":{"user_id":"alice","user_tier":"pro","feature":"chat"}} `,
			&checkRequest{InputText: "Summarize this", Context: checkContext{UserID: "alice", UserTier: "pro", Feature: "chat"}}},
		{`{"context":{"feature":"search","user_id":"zoë"},"extra":[1,{"user_id":"not this"}],"input_text":"hi"}`,
			&checkRequest{InputText: "hi", Context: checkContext{UserID: "zoë", Feature: "search"}}},
		{`{"input_text":"a\"b\\c\/d\be\ff\ng\rh\ti","context":null}`, &checkRequest{InputText: "a\"b\\c/d\be\ff\ng\rh\ti"}},
		{`{"input_text":null,"context":{"user_id":null,"user_tier":"pro"}}`, &checkRequest{Context: checkContext{UserTier: "pro"}}},
		{`{"context":{"deep":{"a":{"b":[[],{}]}},"user_id":"u"}}`, &checkRequest{Context: checkContext{UserID: "u"}}},
		{`{"input_text":5}`, nil},                // a type error, for encoding/json to word
		{`{"context":"alice"}`, nil},             //
		{`{"context":{"user_id":true}}`, nil},    //
		{`{"Input_Text":"x"}`, nil},              // a name in another case
		{`{"context":{"User_Tier":"pro"}}`, nil}, //
	} {
		got := checkRequest{InputText: "untouched"}
		ok := got.decodePlain([]byte(tc.body))
		switch {
		case tc.want == nil && (ok || got != checkRequest{InputText: "untouched"}):
			t.Errorf("decodePlain(%s) = %+v, %v; want it declined, the request untouched", tc.body, got, ok)
		case tc.want != nil && (!ok || got != *tc.want):
			t.Errorf("decodePlain(%s) = %+v, %v; want %+v", tc.body, got, ok, *tc.want)
		}
		if tc.want != nil {
			var slow checkRequest
			if err := json.Unmarshal([]byte(tc.body), &slow); err != nil || slow != *tc.want {
				t.Errorf("the table is wrong about %s: encoding/json makes %+v, %v", tc.body, slow, err)
			}
		}
	}
}

// plainJSON runs on every check: it must not allocate.
func TestPlainJSONAllocatesNothing(t *testing.T) {
	body := []byte(`{"input_text":"Summarize this","context":{"user_id":"alice","user_tier":"pro","feature":"chat","extra":[1,{"a":null}]}}`)
	if n := testing.AllocsPerRun(100, func() {
		if !plainJSON(body) {
			t.Fatal("plainJSON refused a plain body")
		}
	}); n != 0 {
		t.Errorf("plainJSON allocates %v times per body, want 0", n)
	}
}
