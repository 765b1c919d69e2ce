// Package cli is what the policyguard command needs beyond wiring: the
// machinery its table of settings is read through (Setting, Parse), its
// subcommands ("tiers export|import", "backup"), the writer that batches its
// log, and its HTTP server's deadlines and graceful shutdown. The command's
// package main keeps the table itself, the one place a setting is named,
// and wires the service together.
//
// It imports api and policy, never db: main hands the subcommands what they
// need of the store (an Opener, db.Backup), so that only main sees every
// package.
package cli

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Kind is how a Setting's value is written.
type Kind int

const (
	// String takes one value; a flag given twice keeps the last.
	String Kind = iota
	// Bool takes true or false (or 1, 0, t, f, as package flag does); its
	// flag alone means true.
	Bool
	// List takes several values: its flag is repeatable and its
	// environment variable is comma-separated. Parse sees each value.
	List
)

// A Setting is one entry of a command's configuration: a flag, the
// environment variable read where the flag is not given, the default where
// neither is, and Parse, which reads the chosen value. A variable that is
// set but empty counts as unset.
type Setting struct {
	Flag    string // without the dash
	Env     string
	Default string
	Usage   string
	Kind    Kind
	Hint    string // the value's name in the usage message, such as "DURATION"; "string" when empty
	// Parse reads the chosen value into the configuration and says what is
	// wrong with it; it is called exactly once per setting (per value for a
	// List), flags, variables and defaults alike.
	Parse func(value string) error
}

// Value returns the setting's value where no flag gives one: its
// environment variable, read through getenv, or its default.
func (s *Setting) Value(getenv func(string) string) string {
	if v := getenv(s.Env); v != "" {
		return v
	}
	return s.Default
}

// Lookup returns the setting of settings whose flag is name; it panics
// when there is none, a mistake of the program.
func Lookup(settings []Setting, name string) *Setting {
	for i := range settings {
		if settings[i].Flag == name {
			return &settings[i]
		}
	}
	panic("cli: no setting -" + name)
}

// flagValue collects what a flag is given; its default is never shown by
// package flag (String returns ""), so that a usage message cannot print a
// secret.
type flagValue struct {
	s   *Setting
	got []string
}

func (v *flagValue) String() string { return "" }

func (v *flagValue) IsBoolFlag() bool { return v.s.Kind == Bool }

func (v *flagValue) Set(x string) error {
	if v.s.Kind == Bool {
		b, err := strconv.ParseBool(x)
		if err != nil {
			return fmt.Errorf("must be true or false")
		}
		x = strconv.FormatBool(b)
	}
	if v.s.Kind == List {
		v.got = append(v.got, x)
	} else {
		v.got = []string{x}
	}
	return nil
}

// Parse reads settings once, each from its flag in args, else its
// environment variable (through getenv), else its default, and hands each
// value to its Parse in the order of settings. The flag set fs gets one flag
// per setting; its Usage prints header and then the table (PrintUsage). It returns flag.ErrHelp for -h, and the first error of a
// Parse.
func Parse(fs *flag.FlagSet, settings []Setting, args []string, getenv func(string) string, header string) error {
	values := make([]*flagValue, len(settings))
	for i := range settings {
		values[i] = &flagValue{s: &settings[i]}
		fs.Var(values[i], settings[i].Flag, settings[i].Usage)
	}
	fs.Usage = func() { PrintUsage(fs.Output(), header, settings) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for i := range settings {
		s, got := &settings[i], values[i].got
		if got == nil {
			v := s.Value(getenv)
			if s.Kind == Bool {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("%s %q: must be true or false", s.Env, v)
				}
				v = strconv.FormatBool(b)
			}
			got = []string{v}
			if s.Kind == List {
				got = strings.Split(v, ",")
			}
		}
		for _, v := range got {
			if s.Kind == List {
				if v = strings.TrimSpace(v); v == "" {
					continue
				}
			}
			if err := s.Parse(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// PrintUsage writes header and then a paragraph per setting: its flag, what
// it means, its variable and its default.
func PrintUsage(w io.Writer, header string, settings []Setting) {
	fmt.Fprintln(w, header)
	for _, s := range settings {
		hint := " " + s.Hint
		switch {
		case s.Kind == Bool:
			hint = ""
		case s.Hint == "":
			hint = " string"
		}
		where := s.Env
		switch {
		case s.Kind == List:
			where += ", comma-separated"
		case s.Default != "":
			where += ", default " + s.Default
		}
		fmt.Fprintf(w, "  -%s%s\n    \t%s (%s)\n", s.Flag, hint, s.Usage, where)
	}
}
