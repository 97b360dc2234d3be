package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wrapper"
)

// nodeRuntime is what the controller keeps in memory about a node between
// ticks: the resolved work_dir and the installed wrapper.
type nodeRuntime struct {
	cfg nodes.Node
	tr  nodes.Transport

	workDir string // absolute on the node
	wrapper string // absolute path of the installed wrapper, "" until checked
	os      string
	arch    string
}

// pull is the outcome of one node's status call in a tick.
type pull struct {
	node   string
	err    error
	status *wrapper.NodeStatus
	rtt    time.Duration
	// tasks indexes status.Tasks by project and task ID.
	tasks map[string]*wrapper.TaskStatus
}

func taskKey(project, id string) string { return project + "/" + id }

// pullAll calls `status` once on every node, in parallel, bounded by
// max_parallel_ssh. A node that fails is reported in its pull; the others go on.
func (c *Controller) pullAll(ctx context.Context, projects []string) map[string]*pull {
	out := make(map[string]*pull, len(c.nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	limit := max(c.cfg.Controller.MaxParallelSSH, 1)
	sem := make(chan struct{}, limit)
	for name, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := c.pullNode(ctx, n, projects)
			p.node = name
			mu.Lock()
			out[name] = p
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (c *Controller) callTimeout() time.Duration {
	return max(c.cfg.Controller.SSHConnectTimeout*3, 30*time.Second)
}

func (c *Controller) pullNode(ctx context.Context, n *nodeRuntime, projects []string) *pull {
	if n.tr == nil {
		return &pull{err: fmt.Errorf("no transport for node %s", n.cfg.Name)}
	}
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	if err := c.ensureWrapper(ctx, n); err != nil {
		return &pull{err: err}
	}
	argv := []string{n.wrapper, "status", "--root", n.workDir}
	for _, p := range projects {
		argv = append(argv, "--project", p)
	}
	start := time.Now()
	res, err := n.tr.Exec(ctx, argv, nil)
	rtt := time.Since(start)
	if err != nil {
		return &pull{err: fmt.Errorf("status: %w", err)}
	}
	var st wrapper.NodeStatus
	if err := json.Unmarshal(res.Stdout, &st); err != nil || res.ExitCode != 0 {
		n.wrapper = "" // check the installation again next time
		return &pull{err: fmt.Errorf("status: %s", replyError(res, err))}
	}
	p := &pull{status: &st, rtt: rtt, tasks: make(map[string]*wrapper.TaskStatus, len(st.Tasks))}
	for i := range st.Tasks {
		t := &st.Tasks[i]
		p.tasks[taskKey(t.Project, t.Task)] = t
	}
	return p
}

// replyError describes a failed wrapper call from its JSON error reply, or
// from what it printed when the reply is not JSON.
func replyError(res nodes.Result, parseErr error) string {
	var e wrapper.ErrorReply
	if json.Unmarshal(res.Stdout, &e) == nil && e.Error != "" {
		return e.Error
	}
	msg := strings.TrimSpace(string(bytes.TrimSpace(res.Stderr)))
	if msg == "" {
		msg = strings.TrimSpace(string(res.Stdout))
	}
	if msg == "" && parseErr != nil {
		msg = parseErr.Error()
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return fmt.Sprintf("exit %d: %s", res.ExitCode, msg)
}

// ensureWrapper resolves the node's work_dir and makes sure the wrapper of
// this controller's version is installed there: probe the platform, upload to
// a temporary name and rename into .bin/dispatch-wrapper-<version>, check the
// version, reinstall once on mismatch.
func (c *Controller) ensureWrapper(ctx context.Context, n *nodeRuntime) error {
	if n.wrapper != "" {
		return nil
	}
	if n.workDir == "" {
		wd, err := nodes.ExpandHome(ctx, n.tr, n.cfg.WorkDir)
		if err != nil {
			return fmt.Errorf("resolve work_dir %s: %w", n.cfg.WorkDir, err)
		}
		n.workDir = wd
	}
	version, err := c.opts.Wrappers.Version()
	if err != nil {
		return err
	}
	bin := path.Join(n.workDir, ".bin", "dispatch-wrapper-"+version)
	for try := 0; try < 2; try++ {
		res, err := n.tr.Exec(ctx, []string{bin, "version"}, nil)
		if err != nil {
			return fmt.Errorf("check wrapper: %w", err)
		}
		var v wrapper.VersionReply
		if res.ExitCode == 0 && json.Unmarshal(res.Stdout, &v) == nil && v.Version == version {
			n.wrapper, n.os, n.arch = bin, v.OS, v.Arch
			return nil
		}
		if try == 1 {
			return fmt.Errorf("wrapper at %s reports version %q after install, want %q", bin, v.Version, version)
		}
		if err := c.installWrapper(ctx, n, bin); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) installWrapper(ctx context.Context, n *nodeRuntime, bin string) error {
	res, err := n.tr.Exec(ctx, []string{"uname", "-s", "-m"}, nil)
	if err != nil {
		return fmt.Errorf("probe platform: %w", err)
	}
	goos, goarch, err := parseUname(string(res.Stdout))
	if err != nil {
		return err
	}
	b, err := c.opts.Wrappers.Binary(ctx, goos, goarch)
	if err != nil {
		return err
	}
	// Put writes a hidden temporary file and renames it into place, so a
	// half-uploaded wrapper is never executed.
	if err := n.tr.Put(ctx, bin, bytes.NewReader(b), 0o755); err != nil {
		return fmt.Errorf("install wrapper on %s: %w", n.cfg.Name, err)
	}
	c.log.Info("installed wrapper", keyNode, n.cfg.Name, "path", bin, "platform", goos+"/"+goarch)
	return nil
}

func parseUname(s string) (goos, goarch string, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return "", "", fmt.Errorf("unexpected `uname -s -m` output %q", s)
	}
	switch strings.ToLower(f[0]) {
	case "linux":
		goos = "linux"
	case "darwin":
		goos = "darwin"
	default:
		return "", "", fmt.Errorf("unsupported node OS %q: dispatch runs tasks on Linux and macOS", f[0])
	}
	switch f[1] {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64":
		goarch = "arm64"
	default:
		return "", "", fmt.Errorf("unsupported node architecture %q: dispatch supports amd64 and arm64", f[1])
	}
	return goos, goarch, nil
}
