package guardtest_test

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeSnippet returns the fenced code between <!-- name --> and
// <!-- /name --> in README.md.
func readmeSnippet(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- "+name+" -->\n")
	block, _, ok2 := strings.Cut(rest, "<!-- /"+name+" -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no <!-- %s --> ... <!-- /%s --> block", name, name)
	}
	block = strings.TrimSpace(block)
	open, code, _ := strings.Cut(block, "\n")
	if !strings.HasPrefix(open, "```") || !strings.HasSuffix(code, "```") {
		t.Fatalf("the %s block of README.md is not one fenced code block", name)
	}
	return strings.TrimSuffix(code, "```")
}

// funcBody returns the signature and body of the function name in src,
// formatted as gofmt would.
func funcBody(t *testing.T, filename, src, name string) (params, body string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: %v", filename, err)
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			var p, b bytes.Buffer
			if err := format.Node(&p, fset, fn.Type); err != nil {
				t.Fatal(err)
			}
			if err := format.Node(&b, fset, &printer.CommentedNode{Node: fn.Body, Comments: f.Comments}); err != nil {
				t.Fatal(err)
			}
			return p.String(), b.String()
		}
	}
	t.Fatalf("%s has no func %s", filename, name)
	return "", ""
}

// TestREADMEGoSnippet checks that the test README.md shows under "Testing
// your agent" has the body of agentBacksOff, which Example runs and checks.
func TestREADMEGoSnippet(t *testing.T) {
	snippet := readmeSnippet(t, "guardtest-go")
	if !strings.HasPrefix(snippet, "package ") {
		t.Errorf("the README's Go test is not a complete file: it begins %q", strings.SplitN(snippet, "\n", 2)[0])
	}
	readmeParams, readmeBody := funcBody(t, "README.md", snippet, "TestAgentBacksOff")
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, exampleBody := funcBody(t, "example_test.go", string(example), "agentBacksOff")
	if readmeParams != "func(t *testing.T)" {
		t.Errorf("README's TestAgentBacksOff takes %s, want (t *testing.T)", readmeParams)
	}
	if readmeBody != exampleBody {
		t.Errorf("README's TestAgentBacksOff differs from agentBacksOff in example_test.go:\n--- README\n%s\n--- example_test.go\n%s", readmeBody, exampleBody)
	}
}

// TestREADMEPythonSnippet builds policyguard and runs the Python test of
// testdata/agent_backs_off.py against it, whose heart README.md shows: the
// README's lines must be the file's, as printed. Without python3 it is skipped, except
// in CI (CI=true), where it fails. It also checks that the built binary
// refuses -test-clock on an address beyond loopback, with exit status 1.
func TestREADMEPythonSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is missing: CI must run the README's Python snippet")
		}
		t.Skip("python3 not found: the README's Python snippet is not run")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "agent_backs_off.py"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	if excerpt := readmeSnippet(t, "guardtest-python"); !strings.Contains(script, excerpt) {
		t.Errorf("README.md shows lines that are not testdata/agent_backs_off.py's:\n%s", excerpt)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", filepath.Join(dir, "policyguard"), "github.com/policyguard/policyguard")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	var stderr bytes.Buffer
	refused := exec.CommandContext(ctx, filepath.Join(dir, "policyguard"), "-test-clock", "-addr", "0.0.0.0:0", "-db", filepath.Join(dir, "refused.db"))
	refused.Stderr = &stderr
	var exit *exec.ExitError
	if err := refused.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "not loopback") {
		t.Errorf("-test-clock on 0.0.0.0: %v, stderr %q; want exit status 1 and a message", err, stderr.String())
	}

	run := exec.CommandContext(ctx, python, "-c", script)
	run.Dir = dir                     // the script starts ./policyguard
	for _, kv := range os.Environ() { // as printed: ./policyguard, not $POLICYGUARD
		if !strings.HasPrefix(kv, "POLICYGUARD=") {
			run.Env = append(run.Env, kv)
		}
	}
	stderr.Reset()
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("the README's Python snippet: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	want := "3 admitted, then 429: per-minute limit exceeded, retry after 60s\nafter advancing the clock: 200, allowed True\n"
	if string(out) != want {
		t.Errorf("the README's Python snippet printed\n%s\nwant\n%s", out, want)
	}
}
