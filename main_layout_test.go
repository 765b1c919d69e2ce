package main

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDependencyRule holds the packages to the layout's rule: policy
// imports nothing of ours; db and api import policy (db its migrations
// too); web, the admin page, imports policy only, neither api nor db; only
// main wires them all together. api/cli, the command beyond its wiring,
// imports api and policy.
func TestDependencyRule(t *testing.T) {
	const module = "github.com/policyguard/policyguard"
	for pkg, allowed := range map[string][]string{
		"policy":      {},
		"migrations":  {},
		"db":          {"policy", "migrations"},
		"api":         {"policy", "api/gateway", "api/internal/jsonmsg"},
		"api/gateway": {"policy", "api/internal/jsonmsg"},
		"api/client":  {},
		"api/cli":     {"api", "api/gateway", "api/internal/jsonmsg", "policy"}, // never db: main hands it what it needs of the store
		"web":         {"policy"},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			ours, ok := strings.CutPrefix(dep, module+"/")
			if ok && ours != pkg && !slices.Contains(allowed, ours) {
				t.Errorf("%s imports %s; it may import only %v of this module", pkg, ours, allowed)
			}
		}
	}
}

// maxFuncLines is the longest a function outside tests may be, counted
// from its func line to its closing brace.
const maxFuncLines = 100

// longFuncs are the functions allowed beyond maxFuncLines for now, each
// being split; one that has become short must leave this list.
var longFuncs = map[string]bool{}

// TestFunctionLength parses every Go file of the module outside tests and
// fails on a function longer than maxFuncLines.
func TestFunctionLength(t *testing.T) {
	fset := gotoken.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := filepath.ToSlash(path) + " " + funcName(fn)
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			switch {
			case longFuncs[name]:
				seen[name] = true
				if n <= maxFuncLines {
					t.Errorf("%s is %d lines now: take it off longFuncs", name, n)
				}
			case n > maxFuncLines:
				t.Errorf("%s is %d lines, more than %d: split it", name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range longFuncs {
		if !seen[name] {
			t.Errorf("%s is on longFuncs but was not found: take it off", name)
		}
	}
}

// funcName returns fn's name as the program calls it: Name, or
// (*T).Name and T.Name for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // a generic type's method
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	id, ok := typ.(*ast.Ident)
	switch {
	case !ok:
		return fn.Name.Name
	case star != "":
		return "(*" + id.Name + ")." + fn.Name.Name
	}
	return id.Name + "." + fn.Name.Name
}

// TestMainIsWiring holds main.go to wiring: at most 400 lines, the rest
// in the packages it wires.
func TestMainIsWiring(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 400 {
		t.Errorf("main.go is %d lines, more than 400: move what is not wiring to the package it belongs to", n)
	}
}
