package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// The identity is read by one git per key, not one per attempt: kept in
// memory for a supervisor's attempts and on disk for the next supervisor,
// read again as soon as a global config file, HOME, XDG_CONFIG_HOME or
// the git binary changes, and never kept for a config with includes.
func TestGitIdentityCache(t *testing.T) {
	home, xdg, bin := t.TempDir(), t.TempDir(), t.TempDir()
	cacheFile := filepath.Join(t.TempDir(), FileGitIdentityCache)
	var execs atomic.Int64
	answer, killed := "user.name Ada Lovelace\n", false
	run := func(context.Context, []string) ([]byte, bool) {
		execs.Add(1)
		if killed {
			return nil, false
		}
		return []byte(answer), true
	}
	newCache := func() *identityCache { return &identityCache{path: cacheFile, run: run} }
	cache := newCache()
	env := []string{"HOME=" + home, "PATH=" + bin}
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gitconfig := filepath.Join(home, ".gitconfig")
	write(gitconfig, "[user]\n\tname = Ada Lovelace\n")
	steps := []struct {
		name      string
		change    func()
		env       []string
		wantExecs int64
		want      string
	}{
		{"first attempt", nil, env, 1, "Ada Lovelace"},
		{"the next attempt of the supervisor", nil, env, 0, "Ada Lovelace"},
		{"another supervisor, same config", func() { cache = newCache() }, env, 0, "Ada Lovelace"},
		{"~/.gitconfig changed", func() {
			write(gitconfig, "[user]\n\tname = Grace Hopper\n")
			answer = "user.name Grace Hopper\n"
		}, env, 1, "Grace Hopper"},
		{"the same length, other bytes", func() {
			write(gitconfig, "[user]\n\tname = Grace Hoppex\n")
			answer = "user.name Grace Hoppex\n"
		}, env, 1, "Grace Hoppex"},
		{"unchanged again", nil, env, 0, "Grace Hoppex"},
		// A git killed by its deadline (or that could not start) is no
		// answer: asked again, never kept as "no identity".
		{"~/.gitconfig changed, git killed", func() {
			write(gitconfig, "[user]\n\tname = Grace Hoppex \n")
			killed = true
		}, env, 1, ""},
		{"another supervisor, git answers", func() { killed = false; cache = newCache() }, env, 1, "Grace Hoppex"},
		{"unchanged since", nil, env, 0, "Grace Hoppex"},
		{"an XDG config appears", func() { write(filepath.Join(home, ".config", "git", "config"), "[core]\n") }, env, 1, "Grace Hoppex"},
		{"XDG_CONFIG_HOME set", nil, append([]string{"XDG_CONFIG_HOME=" + xdg}, env...), 1, "Grace Hoppex"},
		{"git installed", func() { write(filepath.Join(bin, "git"), "#!/bin/sh\n"); os.Chmod(filepath.Join(bin, "git"), 0o755) }, env, 1, "Grace Hoppex"},
		{"a damaged cache file, another supervisor", func() {
			write(cacheFile, "{not json")
			cache = newCache()
		}, env, 1, "Grace Hoppex"},
		{"a forged cache file writes no quote", func() {
			data, _ := os.ReadFile(cacheFile)
			write(cacheFile, string(data[:len(data)-len(`"}}`)])+`\""}}`)
			cache = newCache()
		}, env, 0, ""},
		{"an include", func() { write(gitconfig, "[include]\n\tpath = other\n") }, env, 1, "Grace Hoppex"},
		{"an include is never kept", nil, env, 1, "Grace Hoppex"},
		{"no HOME", nil, []string{"PATH=" + bin}, 1, "Grace Hoppex"},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		before := execs.Load()
		got := cache.get(t.Context(), st.env)
		if n := execs.Load() - before; n != st.wantExecs {
			t.Errorf("%s: %d gits, want %d", st.name, n, st.wantExecs)
		}
		want := ""
		if st.want != "" {
			want = "[user]\n\tname = \"" + st.want + "\"\n"
		}
		if got.config() != want {
			t.Errorf("%s: identity %+v, config %q; want %q", st.name, got, got.config(), want)
		}
	}

	// The attempts of a batch prepare side by side: one git between them.
	write(gitconfig, "[user]\n\tname = Ada Lovelace\n")
	cache = &identityCache{run: run}
	before := execs.Load()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cache.get(t.Context(), env)
		}()
	}
	wg.Wait()
	if n := execs.Load() - before; n != 1 {
		t.Errorf("8 attempts at once: %d gits, want 1", n)
	}
	if fi, err := os.Stat(cacheFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file: %v, %v; want mode 600", fi, err)
	}
}
