package controller

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// failuresDocDirs are the package prefixes docs/FAILURES.md cites tests by,
// with the directory of each.
var failuresDocDirs = map[string]string{"cmd": "../cmd/dispatch", "ctl": ".", "control": "../control", "plan": "../plan", "policy": "../policy", "nodes": "../nodes", "sshnode": "../nodes/sshnode", "wrapper": "../wrapper", "wire": "../wire", "wrappermain": "../cmd/dispatch-wrapper",
	"domain": "../domain", "store": "../store", "spec": "../spec", "readmodel": "../readmodel", "gitrepo": "../gitrepo", "notify": "../notify",
	"schedule": "../schedule", "yamlval": "../internal/yamlval", "netallow": "../internal/netallow",
	"httpapi": "../httpapi", "dashboard": "../dashboard", "home": "../home",
	"service": "../service", "prune": "../prune", "logrotate": "../internal/logrotate",
	"agentcli": "../internal/agentcli", "textfence": "../internal/textfence", "bench": "../bench", "slurmjob": "../wrapper/slurmjob", "executor": "./executor"}

// TestFailuresDocNamesRealTests keeps docs/FAILURES.md honest: every test it
// cites exists in the package it names ("wrapper" names the node side's
// tree: wrapper/ and its packages).
func TestFailuresDocNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/FAILURES.md")
	if err != nil {
		t.Fatal(err)
	}
	cites := regexp.MustCompile("`([a-z]+):(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(cites) < 20 {
		t.Fatalf("only %d tests cited in FAILURES.md", len(cites))
	}
	for _, m := range cites {
		dir, ok := failuresDocDirs[m[1]]
		if !ok {
			t.Errorf("FAILURES.md cites %s:%s, of a package this test does not know", m[1], m[2])
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if m[1] == "wrapper" {
			sub, _ := filepath.Glob(filepath.Join(dir, "*", "*_test.go"))
			files = append(files, sub...)
		}
		found := false
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), "func "+m[2]+"(") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("FAILURES.md cites %s:%s, which does not exist", m[1], m[2])
		}
	}
}

// TestFailuresDocSaysEachPrefixOnce: the paragraph of docs/FAILURES.md that
// says what each package prefix stands for names every prefix its rows
// cite, once (it was pasted twice, the second copy short of some).
func TestFailuresDocSaysEachPrefixOnce(t *testing.T) {
	b, err := os.ReadFile("../docs/FAILURES.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "Tests are named `package:Test`")
	end := strings.Index(doc, "`TestFailuresDocNamesRealTests` (controller)")
	if start < 0 || end < start {
		t.Fatal("FAILURES.md has no paragraph of package prefixes (\"Tests are named `package:Test`\" … \"`TestFailuresDocNamesRealTests` (controller)\")")
	}
	para := doc[start:end]
	if n := strings.Count(doc, "Tests are named `package:Test`"); n != 1 {
		t.Errorf("FAILURES.md says what the prefixes stand for %d times, want once", n)
	}
	cited := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z]+):Test[A-Za-z0-9_]+`").FindAllStringSubmatch(doc, -1) {
		cited[m[1]] = true
	}
	for _, prefix := range slices.Sorted(maps.Keys(cited)) {
		if n := strings.Count(para, "`"+prefix+"`"); n != 1 {
			t.Errorf("the prefixes paragraph of FAILURES.md names `%s` %d times, want once", prefix, n)
		}
	}
}
