package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

const (
	runSynopsis = `dispatch run [--tool T] [--node N] [--project P] "prompt or script" | -f FILE`
	// runTaskID is the one task of a one-off run's project.
	runTaskID = "S01"
	// runMarker starts the project.yaml that `dispatch run` writes: a
	// later run may replace only a project that begins with it.
	runMarker = "# Written by `dispatch run`"
	// maxRunText is the most text a one-off run takes: the size of the
	// largest spec file (spec's own limit).
	maxRunText = 8 << 20
	// maxSlugLen bounds the part of the task's file name taken from the
	// text's first line (its title).
	maxSlugLen = 48
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run one prompt (or, with --tool shell, one script) as a one-task project in the foreground",
		ArgsUsage: `"prompt or script"`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tool", Usage: "run the text with tool `T` (shell: as a /bin/sh script; default: the node's tool, else claude)"},
			&cli.StringFlag{Name: "node", Usage: "run it on node `N` of nodes.yaml"},
			&cli.StringFlag{Name: "project", Usage: "the project's name `P` (default: run-<date>-<time>); a later run with the same P is that project's next run"},
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "read the text from `FILE` (default: the argument, else stdin)"},
		},
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	e, err := newEnv(c)
	if err != nil {
		return err
	}
	text, err := runText(c)
	if err != nil {
		return err
	}
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	tool, node := c.String("tool"), c.String("node")
	if err := checkRunFlags(cfg, tool, node); err != nil {
		return err
	}
	name, again, err := runProjectDir(c.Context, e, c.String("project"))
	if err != nil {
		return err
	}
	if err := writeRunSpec(filepath.Join(e.specsDir(), name), tool, node, text); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "dispatch: one-off run of %s in %s\n", runTaskID, filepath.Join(e.specsDir(), name))
	// A project run before starts a new run that reruns its task, even
	// when the text is the same: --fresh.
	sp := startParams{so: control.StartOptions{NoIntegrate: true, Fresh: again}}
	if node != "" {
		sp.only = []string{node}
	}
	err = startProject(c.Context, e, name, sp)
	var fail *workFailed
	if err != nil && !errors.As(err, &fail) {
		if !again {
			forgetUnstarted(context.WithoutCancel(c.Context), e, name)
		}
		return err
	}
	return runOutcome(e, name, err)
}

// forgetUnstarted removes the spec of a new one-off project that never
// started (refused by the plan, say): there is no run to keep it for.
func forgetUnstarted(ctx context.Context, e *env, name string) {
	if known, err := ranBefore(ctx, e, name); err != nil || known {
		return
	}
	dir := filepath.Join(e.specsDir(), name)
	old, _ := filepath.Glob(filepath.Join(dir, runTaskID+"*.md"))
	for _, f := range append(old, filepath.Join(dir, spec.ConfigFile)) {
		os.Remove(f)
	}
	os.Remove(dir) // only when nothing else is in it
}

// runText is the one-off run's text: the argument, the file of -f, or
// stdin when it is not a terminal; never empty.
func runText(c *cli.Context) (string, error) {
	var raw []byte
	switch file := c.String("file"); {
	case c.NArg() > 1:
		return "", usagef(`dispatch run "echo one two"`, "run takes the text as one argument (quote it), not %d", c.NArg())
	case c.NArg() == 1 && file != "":
		return "", usagef(runSynopsis, "give the text as an argument or with -f, not both")
	case c.NArg() == 1:
		raw = []byte(c.Args().First())
	case file != "":
		b, err := spec.ReadFile(file, maxRunText)
		if err != nil {
			return "", usagef(runSynopsis, "-f %s: %v", file, err)
		}
		raw = b
	case term.IsTerminal(int(os.Stdin.Fd())):
		return "", usagef(runSynopsis, "no text to run: give it as an argument, with -f FILE, or on stdin")
	default:
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxRunText+1))
		if err != nil {
			return "", fmt.Errorf("read the text from stdin: %w", err)
		}
		if len(b) > maxRunText {
			return "", usagef("dispatch run -f FILE", "the text on stdin is larger than %s", spec.SizeString(maxRunText))
		}
		raw = b
	}
	text := string(raw)
	if !utf8.ValidString(text) {
		return "", usagef(runSynopsis, "the text is not valid UTF-8")
	}
	if strings.TrimSpace(text) == "" {
		return "", usagef(runSynopsis, "the text to run is empty")
	}
	return text, nil
}

// checkRunFlags checks --tool and --node against nodes.yaml.
func checkRunFlags(cfg *nodes.Config, tool, node string) error {
	if tool != "" {
		tools := append(slices.Clone(spec.BuiltinTools), sortedToolNames(cfg)...)
		if !slices.Contains(tools, tool) {
			return usagef("dispatch run --tool shell ...", "--tool: no tool %q (tools: %s; nodes.yaml's tools: adds others)", tool, strings.Join(tools, ", "))
		}
	}
	if node != "" {
		if _, ok := cfg.Node(node); !ok {
			return usagef("dispatch run --node "+strings.Join(nodeNames(cfg), "|")+" ...", "--node: no node %q in %s", node, cfg.File)
		}
	}
	return nil
}

func sortedToolNames(cfg *nodes.Config) []string {
	var out []string
	for name := range cfg.Tools {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// runProjectDir returns the project of a one-off run and makes its
// directory under specs/: project (checked, and refused when it is a
// project `dispatch run` did not write or one still running), else a new
// run-<date>-<time>. again says the project has run before.
func runProjectDir(ctx context.Context, e *env, project string) (name string, again bool, err error) {
	specs := e.specsDir()
	if err := os.MkdirAll(specs, 0o755); err != nil {
		return "", false, err
	}
	if project == "" {
		base := "run-" + time.Now().Format("20060102-150405")
		for i := 1; i < 100; i++ {
			cand := base
			if i > 1 {
				cand = fmt.Sprintf("%s-%d", base, i)
			}
			err = os.Mkdir(filepath.Join(specs, cand), 0o755)
			if err == nil {
				return cand, false, nil
			}
			if !errors.Is(err, fs.ErrExist) {
				return "", false, err
			}
		}
		return "", false, fmt.Errorf("no free project name %s-N under %s", base, specs)
	}
	if err := spec.ValidName(project); err != nil {
		return "", false, &usageError{err: fmt.Errorf("--project: %w", err), hint: "dispatch run --project my-check ..."}
	}
	dir := filepath.Join(specs, project)
	b, err := os.ReadFile(filepath.Join(dir, spec.ConfigFile))
	switch {
	case err == nil && !strings.HasPrefix(string(b), runMarker):
		return "", false, usagef("dispatch run --project <another name> ...", "--project: %s is a project of its own, not one dispatch run wrote; run leaves it alone", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return "", false, err
	case err != nil:
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return "", false, usagef("dispatch run --project <another name> ...", "--project: %s exists and has no project.yaml of dispatch run; run leaves it alone", dir)
		}
	}
	again, err = ranBefore(ctx, e, project)
	if err != nil {
		return "", false, err
	}
	return project, again, os.MkdirAll(dir, 0o755)
}

// ranBefore says whether project has run before, and refuses one whose
// current run has not ended: its spec is about to be replaced.
func ranBefore(ctx context.Context, e *env, project string) (bool, error) {
	st, err := store.OpenReadOnly(ctx, e.dbPath())
	if errors.Is(err, store.ErrNoDatabase) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer st.Close()
	p, err := st.Project(ctx, project)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if p.State == domain.ProjectActive {
		return true, usagef("dispatch status "+project, "--project: %s's current run has not ended (dispatch start %s resumes it, dispatch stop %s ends it)", project, project, project)
	}
	return true, nil
}

// writeRunSpec writes the one-task project into dir: project.yaml (no
// integration phase) and S01-<slug>.md, whose body is text as it is. It
// removes the task file of an earlier run of the project.
func writeRunSpec(dir, tool, node, text string) error {
	old, err := filepath.Glob(filepath.Join(dir, runTaskID+"*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	cfg := runMarker + ": a one-task project; the next `dispatch run --project " + filepath.Base(dir) + "` replaces it.\nintegration: false\n"
	if err := os.WriteFile(filepath.Join(dir, spec.ConfigFile), []byte(cfg), 0o644); err != nil {
		return err
	}
	// The front matter is always written, so that text beginning with
	// "---" stays text. Tool and node are names checked against nodes.yaml.
	var b strings.Builder
	b.WriteString("---\n")
	if tool != "" {
		fmt.Fprintf(&b, "tool: %s\n", tool)
	}
	if node != "" {
		fmt.Fprintf(&b, "node: %s\n", node)
	}
	b.WriteString("---\n")
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	file := runTaskID + "-" + runSlug(text) + ".md"
	return os.WriteFile(filepath.Join(dir, file), []byte(b.String()), 0o644)
}

// runSlug makes the task's slug, and so its title, from the text's first
// line (after a #! line): ASCII letters and digits, other runs of
// characters as one '-', shortened; "run" when nothing is left.
func runSlug(text string) string {
	first := ""
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#!") {
			first = line
			break
		}
	}
	var b strings.Builder
	dash := false
	for _, r := range first {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			if b.Len() >= maxSlugLen || dash && b.Len()+1 >= maxSlugLen {
				break
			}
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return "run"
	}
	return b.String()
}

// runOutcome says where a one-off run's output and log are: after the
// log itself when the run passed (what a one-off command printed is what
// its user came for), and with the end of the log added to start's
// failure when it failed.
func runOutcome(e *env, name string, startErr error) error {
	dir := filepath.Join(home.RunsDir(e.home, name), runTaskID)
	logPath := filepath.Join(dir, "task.log")
	if startErr == nil {
		if err := printLog(e, logPath); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.out, "output: %s\nlog: %s (dispatch logs %s %s)\n", filepath.Join(dir, "output"), logPath, name, runTaskID)
	if startErr == nil {
		return nil
	}
	fail := &workFailed{}
	errors.As(startErr, &fail)
	end := readmodel.LogTail(logPath, 15)
	if end == "" {
		return fail
	}
	tail := fmt.Sprintf("the end of %s:\n%s", logPath, end)
	if fail.msg != "" {
		tail = fail.msg + "\n" + tail
	}
	return &workFailed{msg: tail}
}

// printLog copies the log at path to stdout as it is read (a log of
// gigabytes is never held in memory), escaping its terminal controls on
// a terminal as `dispatch logs` does, and ends it with a newline.
func printLog(e *env, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not collected: the lines below say where it would be
	}
	if err != nil {
		return err
	}
	defer f.Close()
	out := e.out
	if e.tty {
		w := termtext.NewWriter(e.out)
		defer w.Flush()
		out = w
	}
	last := &lastByte{w: out}
	if _, err := io.Copy(last, f); err != nil {
		return fmt.Errorf("print %s: %w", path, err)
	}
	if last.b != 0 && last.b != '\n' {
		_, err = io.WriteString(out, "\n")
	}
	return err
}

// lastByte passes writes to w, keeping the last byte written.
type lastByte struct {
	w io.Writer
	b byte
}

func (l *lastByte) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.b = p[n-1]
	}
	return n, err
}
