package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// Parse gives each setting its flag, else its variable (unless empty),
// else its default, and hands a list's values one by one.
func TestParsePrecedence(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // name, on, items
	}{
		{nil, nil, "def false []"},
		{nil, map[string]string{"T_NAME": "env", "T_ON": "1", "T_ITEMS": "a, b,,c"}, "env true [a b c]"},
		{nil, map[string]string{"T_NAME": ""}, "def false []"},
		{[]string{"-name", "flag", "-on", "-item", "x", "-item", "y"}, map[string]string{"T_NAME": "env", "T_ON": "false", "T_ITEMS": "a"}, "flag true [x y]"},
		{[]string{"-name", "", "-on=false"}, map[string]string{"T_NAME": "env", "T_ON": "maybe"}, " false []"},
	} {
		var name string
		var on bool
		var items []string
		settings := []Setting{
			{Flag: "name", Env: "T_NAME", Default: "def", Parse: SetString(&name)},
			{Flag: "on", Env: "T_ON", Default: "false", Kind: Bool, Parse: SetBool(&on)},
			{Flag: "item", Env: "T_ITEMS", Kind: List, Parse: func(v string) error { items = append(items, v); return nil }},
		}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := Parse(fs, settings, tc.args, func(k string) string { return tc.env[k] }, ""); err != nil {
			t.Errorf("%q %v: %v", tc.args, tc.env, err)
			continue
		}
		if got := fmt.Sprintf("%s %v %v", name, on, items); got != tc.want {
			t.Errorf("%q %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// A variable that is no boolean, a Parse's error and a stray argument stop
// Parse; -h is flag.ErrHelp, after the usage, which never shows a variable.
func TestParseErrors(t *testing.T) {
	settings := func() []Setting {
		var on bool
		return []Setting{
			{Flag: "on", Env: "T_ON", Default: "false", Kind: Bool, Usage: "switch", Parse: SetBool(&on)},
			{Flag: "secret", Env: "T_SECRET", Usage: "a secret", Parse: func(v string) error {
				return Check(!strings.Contains(v, " "), "secret %q: no spaces", v)
			}},
		}
	}
	env := map[string]string{"T_SECRET": "hush"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"T_ON": "maybe"}, `T_ON "maybe": must be true or false`},
		{[]string{"-secret", "a b"}, nil, `secret "a b": no spaces`},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
		{[]string{"-on=maybe"}, nil, `invalid boolean value "maybe" for -on`},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		err := Parse(fs, settings(), tc.args, func(k string) string { return tc.env[k] }, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	var out strings.Builder
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&out)
	if err := Parse(fs, settings(), []string{"-h"}, func(k string) string { return env[k] }, "Usage:"); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if want := "Usage:\n  -on\n    \tswitch (T_ON, default false)\n  -secret string\n    \ta secret (T_SECRET)\n"; out.String() != want {
		t.Errorf("usage:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The passthrough setting was a boolean: "false" still forwards nothing, so
// old environment files start, and "true" is refused with what to write.
func TestAppendPassthrough(t *testing.T) {
	for _, tc := range []struct {
		values  []string
		want    []string
		wantErr string
	}{
		{values: []string{"/files, /models"}, want: []string{"/files", "/models"}},
		{values: []string{"/files", "/models"}, want: []string{"/files", "/models"}},
		{values: []string{"false"}},
		{values: []string{" FALSE "}},
		{values: []string{"0"}},
		{values: []string{"true"}, wantErr: "name the path prefixes to forward, such as /files,/models"},
		{values: []string{"1"}, wantErr: "name the path prefixes to forward"},
	} {
		var got []string
		parse := AppendPassthrough(&got)
		var err error
		for _, v := range tc.values {
			if err = parse(v); err != nil {
				break
			}
		}
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one saying %q", tc.values, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.values, err)
		case tc.wantErr == "" && !slices.Equal(got, tc.want):
			t.Errorf("%q: prefixes %q, want %q", tc.values, got, tc.want)
		}
	}
}
