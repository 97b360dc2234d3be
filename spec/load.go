package spec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/dispatch-tool/dispatch/domain"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/gitrepo"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/schedule"
)

// Well-known files of a project directory.
const (
	SharedContextFile = "SHARED_CONTEXT.md"
	ConfigFile        = "project.yaml"
)

// Projects returns the sorted names of the subdirectories of specsDir that
// hold at least one task file. A missing specsDir has no projects.
// Directories whose names break the name rule, or that cannot be read,
// are left out: they could not be loaded anyway.
func Projects(specsDir string) ([]string, error) {
	entries, err := os.ReadDir(specsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list projects in %s: %w", specsDir, err)
	}
	var out []string
	for _, e := range entries {
		if ValidName(e.Name()) != nil || !isDir(specsDir, e) {
			continue
		}
		if hasTaskFile(filepath.Join(specsDir, e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func hasTaskFile(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, _, isTask, problem := taskFileName(e.Name()); isTask && problem == "" && !isDir(dir, e) {
			return true
		}
	}
	return false
}

// isDir reports whether a directory entry is a directory, following
// symbolic links.
func isDir(parent string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink != 0 {
		fi, err := os.Stat(filepath.Join(parent, e.Name()))
		return err == nil && fi.IsDir()
	}
	return e.IsDir()
}

// Load reads and validates specs/<name> under specsDir.
//
// The name is checked with ValidName before any path is built from it. A
// project that does not exist yields *UnknownProjectError; the name must
// match the directory's name exactly, also on case-insensitive file
// systems. Problems in the project's files are returned together as
// Errors, sorted by file and line, and then the project is nil. Paths in
// errors are built from specsDir as given; Project.Dir and Task.File are
// absolute.
func Load(specsDir, name string) (*Project, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("project name: %w", err)
	}
	entries, err := os.ReadDir(specsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load project %s: %w", name, err)
	}
	found := false
	for _, e := range entries {
		if e.Name() == name && isDir(specsDir, e) {
			found = true
			break
		}
	}
	if !found {
		known, err := Projects(specsDir)
		if err != nil {
			return nil, fmt.Errorf("load project %s: %w", name, err)
		}
		return nil, &UnknownProjectError{Name: name, SpecsDir: specsDir, Known: known}
	}
	dir := filepath.Join(specsDir, name)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("load project %s: %w", name, err)
	}
	l := &loader{dir: dir, abs: abs, project: &Project{Name: name, Dir: abs}}
	if err := l.load(); err != nil {
		return nil, fmt.Errorf("load project %s: %w", name, err)
	}
	if len(l.errs) > 0 {
		l.errs.Sort()
		return nil, l.errs
	}
	l.project.shared, l.project.sections = l.shared, l.sections
	return l.project, nil
}

type loader struct {
	dir     string // as built from specsDir, for messages
	abs     string
	project *Project
	errs    Errors

	shared   *sharedContext // nil when there is no SHARED_CONTEXT.md
	sections map[string]section
}

type sharedContext struct {
	path   string
	broken bool // unreadable; its sections are unknown, so do not blame the specs
	names  []string
}

// parsed is a task with what is needed to check it against the others.
type parsed struct {
	task     *Task
	depLines map[string]int

	file     taskFile
	body     []string  // the body's lines, as in the snapshot; nil once hashed, unless a matrix makes tasks of it
	sections []section // the contexts appended to the body
	// matrix is the spec's matrix; matrixAt and matrixFileAt are where
	// its keys were written (nil: not written).
	matrix                 *matrix
	matrixAt, matrixFileAt *yaml.Node
}

type taskFile struct {
	name, id, slug string
}

func (l *loader) add(file string, line int, msg, fix string) {
	l.errs = append(l.errs, &Error{File: file, Line: line, Msg: msg, Fix: fix})
}

func (l *loader) path(name string) string { return filepath.Join(l.dir, name) }

// absPath is path made absolute: under l.abs when it is one of l.path's,
// without asking for the working directory again.
func (l *loader) absPath(path string) string {
	if rel, ok := strings.CutPrefix(path, l.dir+string(filepath.Separator)); ok && l.dir != "" {
		return filepath.Join(l.abs, rel)
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// evalSymlinks is filepath.EvalSymlinks, counted by tests.
var evalSymlinks = filepath.EvalSymlinks

// load fills l.project and l.errs. Its error is for failures to read the
// directory itself; everything else goes into l.errs.
func (l *loader) load() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	var files []taskFile
	var mdOther []string
	sawTaskName := false
	for _, e := range entries {
		name := e.Name()
		if isDir(l.dir, e) {
			continue
		}
		id, slug, isTask, problem := taskFileName(name)
		switch {
		case name == ConfigFile || name == SharedContextFile:
		case isTask && problem != "":
			sawTaskName = true
			l.add(l.path(name), 0, "invalid task file name: "+problem,
				"rename it to <ID>.md or <ID>-<slug>.md, e.g. S01-add-login.md; names match "+namePattern+" and never contain \"..\"")
		case isTask:
			sawTaskName = true
			files = append(files, taskFile{name: name, id: id, slug: slug})
		case strings.EqualFold(filepath.Ext(name), ".md") && !strings.EqualFold(name, "README.md"):
			mdOther = append(mdOther, name)
		}
	}

	l.loadConfig()
	l.loadShared()

	if !sawTaskName {
		l.add(l.dir, 0, "no task files", fmt.Sprintf("write a task spec as %s", filepath.Join(l.dir, "S01-<title>.md")))
	}

	for _, name := range mdOther {
		if filepath.Clean(name) != l.project.Config.IntegrationSpec {
			l.project.Ignored = append(l.project.Ignored, name)
		}
	}

	// Every ID with a well-named file is known, even when its file has
	// errors, so that one bad file does not also make its dependents fail.
	known := map[string]string{}
	var all []*parsed
	for _, f := range files {
		if first, dup := known[f.id]; dup {
			l.add(l.path(f.name), 0, fmt.Sprintf("duplicate task ID %s: %s and %s", f.id, first, f.name),
				fmt.Sprintf("give each task its own ID, e.g. rename %s", f.name))
			l.parseTask(f) // for its own problems; the first file wins
			continue
		}
		known[f.id] = f.name
		if p := l.parseTask(f); p != nil {
			if p.matrix == nil {
				// Its hash is taken: the text is read again when it is
				// stored (Project.Snapshot). A matrix's tasks are made
				// from the body below.
				p.body = nil
			}
			all = append(all, p)
		}
	}
	all = l.expandMatrices(all, known)
	l.checkDeps(all, known)

	for _, p := range all {
		l.project.Tasks = append(l.project.Tasks, p.task)
	}
	l.addBaseline(known)
	slices.SortFunc(l.project.Tasks, func(a, b *Task) int { return strings.Compare(a.ID, b.ID) })
	l.checkBranches()
	return nil
}

// BaselineID is the task that gates the base before any task works on it
// (project.yaml gate.baseline; see domain.BaselineID).
const BaselineID = domain.BaselineID

// baselineScript is the baseline task's spec: it changes nothing.
const baselineScript = "# Gate the base (gate.baseline)\ntrue\n"

// addBaseline adds the baseline task when project.yaml asks for it; a
// spec of the author's with its ID is refused.
func (l *loader) addBaseline(known map[string]string) {
	g := l.project.Config.Gate
	if g == nil || !g.Baseline {
		return
	}
	if name, ok := known[BaselineID]; ok {
		l.add(l.path(name), 0, BaselineID+" is the task gate.baseline adds (the project gate on the base)",
			"give this task another ID, or remove baseline: from project.yaml's gate")
		return
	}
	snap := []byte(baselineScript)
	zero := 0
	t := &Task{ID: BaselineID, Title: "Gate the base (gate.baseline)", Type: DefaultType, Tool: "shell", Priority: 1,
		MaxRetries: &zero, Sandbox: l.project.Config.Sandbox, Network: l.project.Config.Network, Limits: l.project.Config.Limits,
		Timeout: l.project.Config.Timeout, text: snap, Hash: hashOf(snap), Size: len(snap)}
	l.project.Tasks = append(l.project.Tasks, t)
}

// checkBranches checks, in a git-native project, the branch names the
// project will make in the operator's repository: dispatch/<project>/<ID>
// for each task, the phase tasks' and final. Task IDs are a capital
// letter and digits, which no rule of git's refuses, so it is the
// project's name that decides: git is asked of the result's branch and
// of the first task's, and the rules are applied to every name.
func (l *loader) checkBranches() {
	if l.project.Config.Source == nil {
		return
	}
	name := l.project.Name
	branches := []string{"final"}
	for _, t := range l.project.Tasks {
		branches = append(branches, t.ID)
	}
	branches = append(branches, "S99", "V01", "F01")
	for i, id := range branches {
		b := "dispatch/" + name + "/" + id
		why := gitrepo.BranchRule(b)
		if i < 2 && why == "" {
			why = gitrepo.BranchProblem(context.Background(), b)
		}
		if why != "" {
			l.add(l.dir, 0, fmt.Sprintf("project name %q makes the branch %s, which git refuses: %s", name, b, why),
				fmt.Sprintf("rename the project's directory %s (e.g. to %q), or remove repo: from its project.yaml", l.dir, strings.ReplaceAll(name, ".", "-")))
			return
		}
	}
}

// readText reads a file as normalised UTF-8 text, reporting problems.
// exists is false when the file is not there. What it reads is what it
// checked (openChecked): a link swapped in meanwhile is not followed out.
func (l *loader) readText(path string) (text string, exists, ok bool) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, false
	}
	var raw []byte
	if err == nil {
		raw, err = l.readChecked(path, fi)
	}
	if err != nil {
		l.readProblem(path, err)
		return "", true, false
	}
	text, bad := decodeText(raw)
	if bad > 0 {
		l.add(path, bad, "invalid UTF-8", "save the file as UTF-8")
		return "", true, false
	}
	return text, true, true
}

// readProblem reports why readChecked could not read path.
func (l *loader) readProblem(path string, err error) {
	var tooLarge *TooLargeError
	var outside *outsideError
	var changed *changedError
	switch {
	case errors.As(err, &outside):
		msg, fix := l.outsideProblem(outside.resolved)
		l.add(path, 0, msg, fix)
	case errors.Is(err, errBecameLink):
		l.add(path, 0, err.Error(), l.changedFix())
	case errors.As(err, &changed):
		l.add(path, 0, changed.Error(), l.changedFix())
	case errors.Is(err, fs.ErrNotExist):
		// A dangling symbolic link.
		l.add(path, 0, "cannot read: it is a symbolic link to a file that does not exist", "point the link at an existing file, or remove it")
	case errors.Is(err, ErrNotRegular):
		// Opening a FIFO would block Load.
		l.add(path, 0, "not a regular file", "replace it with a plain text file")
	case errors.As(err, &tooLarge):
		l.add(path, 0, fmt.Sprintf("file is larger than %d MiB", maxFileSize>>20), "keep specs short; put large material in the project's base directory")
	case errors.Is(err, fs.ErrPermission):
		l.add(path, 0, fmt.Sprintf("cannot read: %v", err), "make it readable by the user who runs dispatch (chmod u+r), and its directories searchable")
	default:
		l.add(path, 0, fmt.Sprintf("cannot read: %v", err), "")
	}
}

// integrationSpec reads integration_spec's value v: a file inside the
// project, read as a start reads it (size, permission), so that only a
// change after Load fails the start.
func (l *loader) integrationSpec(y yamlFile, key string, v *yaml.Node) string {
	s, ok := y.String(v, "", key)
	if !ok {
		return ""
	}
	name, in := l.inside(y, key, v, s, false)
	if in {
		l.checkReadable(filepath.Join(l.abs, filepath.FromSlash(name)))
	}
	return name
}

// checkReadable reads path, a file of the project that Load names but
// does not keep (integration_spec), as a later read will, and says why
// it cannot.
func (l *loader) checkReadable(path string) {
	fi, err := os.Lstat(path)
	if err == nil {
		_, err = l.readChecked(path, fi)
	}
	if err != nil {
		l.readProblem(path, err)
	}
}

// ProjectKeys are the keys project.yaml accepts.
var ProjectKeys = []string{"integration", "verification", "max_fix_rounds", "integration_spec",
	"tool", "type", "timeout", "max_retries", "base", "repo", "ref", "setup", "halt", "stall_timeout", "budget", "notify", "schedule", "sandbox", "limits", "network", "gate", "retention", "files", "start_from", "on_conflict", "preemptible"}

func (l *loader) loadConfig() {
	path := l.path(ConfigFile)
	text, _, ok := l.readText(path)
	if !ok {
		return
	}
	y := yamlFile{yamlval.Doc{Problems: &l.errs, File: path}}
	root := y.parse(text, ConfigFile)
	if root == nil {
		return
	}
	c := &l.project.Config
	var at configNodes
	y.fields(root, ConfigFile, ProjectKeys, func(key string, v *yaml.Node) { l.configKey(y, c, &at, key, v) })
	networkNeedsSandbox(y, c.Network, c.Sandbox, at.network, at.sandbox)
	if at.files != nil && at.repo != nil {
		y.Errorf(at.files, filesInRepoFix, "files: is for projects without repo:")
	}
	if at.startFrom != nil && at.repo != nil && c.StartFrom == domain.StartInputs {
		y.Errorf(at.startFrom, inputsInRepoFix, inputsInRepoMsg)
	}
	if at.onConflict != nil && at.repo == nil {
		y.Errorf(at.onConflict, onConflictFix, onConflictMsg)
	}
	l.resolveRepo(y, at.repo, at.ref, at.base)
}

// configNodes are where project.yaml wrote the keys that are checked
// together once it is read (nil: not written).
type configNodes struct {
	repo, ref, base, network, sandbox, files, startFrom, onConflict *yaml.Node
}

// filesInRepoFix is the fix of a files: in a git-native project, whose
// tasks start from a checkout of the repository.
const filesInRepoFix = "commit the files to the repository (the tasks start from its checkout), or remove repo:"

// configKey reads one key of project.yaml into c, noting in at where the
// keys checked together are.
func (l *loader) configKey(y yamlFile, c *ProjectConfig, at *configNodes, key string, v *yaml.Node) {
	switch key {
	case "repo":
		if s, ok := y.String(v, "", key); ok {
			if strings.TrimSpace(s) == "" {
				y.Errorf(v, "give the path of a git repository, relative to the project's spec directory or absolute", "repo is empty")
			} else {
				c.Repo, at.repo = s, v
			}
		}
	case "ref":
		if s, ok := y.String(v, "", key); ok {
			if strings.TrimSpace(s) == "" || strings.HasPrefix(s, "-") {
				y.Errorf(v, "give a branch, tag or commit, or leave ref: out for HEAD", "ref %q is not a branch, tag or commit", s)
			} else {
				c.Ref, at.ref = s, v
			}
		}
	case "preemptible":
		if b, ok := y.Bool(v, "", key); ok {
			c.Preemptible = &b
		}
	case "integration", "verification":
		if b, ok := y.Bool(v, "", key); ok {
			if key == "integration" {
				c.Integration = &b
			} else {
				c.Verification = &b
			}
		}
	case "max_fix_rounds":
		if n, ok := y.Int(v, "", key, 0, yamlval.MaxInt); ok {
			c.MaxFixRounds = &n
		}
	case "max_retries":
		if n, ok := y.Int(v, "", key, 0, yamlval.MaxInt); ok {
			c.MaxRetries = &n
		}
	case "integration_spec":
		c.IntegrationSpec = l.integrationSpec(y, key, v)
	case "base":
		if s, ok := y.String(v, "", key); ok {
			c.Base, _ = l.inside(y, key, v, s, true)
			at.base = v
		}
	case "files":
		c.Files, at.files = l.files(y, key, v), v
	case "start_from":
		c.StartFrom, _ = y.startFrom(key, v)
		at.startFrom = v
	case "on_conflict":
		c.OnConflict, _ = y.onConflict(key, v)
		at.onConflict = v
	case "notify":
		c.Notify = notify.FromYAML(y.Doc, v)
	case "gate":
		c.Gate = y.gate(v)
	case "retention":
		c.Retention, _ = y.Retention(v, "", key)
	case "schedule":
		c.Schedule = y.schedule(v)
	case "tool":
		c.Tool, _ = y.name(key, v)
	case "type":
		c.Type, _ = y.typ(key, v)
	case "timeout":
		c.Timeout, _ = y.Duration(v, "", key)
	case "stall_timeout":
		c.Stall, _ = y.Duration(v, "", key)
	case "sandbox":
		c.Sandbox, _ = y.Sandbox(v, "", key)
		at.sandbox = v
	case "network":
		c.Network, _ = y.Network(v, "", key)
		at.network = v
	case "limits":
		c.Limits, _ = y.Limits(v, "", key)
	case "budget":
		y.budget(v, &c.Budget)
	case "setup":
		if s, ok := y.String(v, "", key); ok {
			if strings.TrimSpace(s) == "" {
				y.Errorf(v, "remove the key or write a command", "setup is empty")
			} else {
				c.Setup = s
			}
		}
	case "halt":
		if v.Kind != yaml.MappingNode {
			y.Errorf(v, "write halt: {fail: N}", "halt must be a mapping, not %s", yamlval.Describe(v))
			return
		}
		y.fields(v, "halt", []string{"fail"}, func(key string, v *yaml.Node) {
			c.Halt.Fail, _ = y.Int(v, "", "halt.fail", 0, yamlval.MaxInt)
		})
	}
}

// DefaultGateTimeout is a gate run's timeout when gate: names none.
const DefaultGateTimeout = 10 * time.Minute

// gate reads project.yaml's gate: a command (the project gate alone), or
// {task, project, timeout, baseline} with at least one command.
func (y yamlFile) gate(v *yaml.Node) *Gate {
	const example = "write gate: make test, or gate: {task: go vet ./..., project: go test ./..., timeout: 10m}"
	command := func(n *yaml.Node, key string) (string, bool) {
		s, ok := y.String(n, "", key)
		if ok && strings.TrimSpace(s) == "" {
			y.Errorf(n, example, "%s is empty: a gate needs a command", key)
			return "", false
		}
		return s, ok
	}
	g := &Gate{Timeout: DefaultGateTimeout}
	switch yamlval.Resolve(v).Kind {
	case yaml.ScalarNode:
		var ok bool
		if g.Project, ok = command(v, "gate"); !ok {
			return nil
		}
		return g
	case yaml.MappingNode:
	default:
		y.Errorf(v, example, "gate must be a command or a mapping, not %s", yamlval.Describe(v))
		return nil
	}
	ok := true
	y.fields(v, "gate", []string{"task", "project", "timeout", "baseline"}, func(key string, n *yaml.Node) {
		var good bool
		switch key {
		case "task":
			g.Task, good = command(n, "gate.task")
		case "project":
			g.Project, good = command(n, "gate.project")
		case "timeout":
			if g.Timeout, good = y.Duration(n, "", "gate.timeout"); good && g.Timeout <= 0 {
				y.Errorf(n, "write a duration such as 10m", "gate.timeout must be positive")
				good = false
			}
		case "baseline":
			g.Baseline, good = y.Bool(n, "", "gate.baseline")
		}
		ok = ok && good
	})
	if !ok {
		return nil
	}
	if g.Task == "" && g.Project == "" {
		y.Errorf(v, example, "gate has no command: give task:, project: or both")
		return nil
	}
	if g.Baseline && g.Project == "" {
		y.Errorf(v, "add project: (the baseline runs the project gate on the base), or remove baseline:", "gate.baseline needs gate.project")
		return nil
	}
	return g
}

// budget reads project.yaml's budget: {usd, tokens, max_attempt_usd}.
func (y yamlFile) budget(v *yaml.Node, b *Budget) {
	if v.Kind != yaml.MappingNode {
		y.Errorf(v, "write budget: {usd: 20, tokens: 5000000, max_attempt_usd: 50} (any of them)", "budget must be a mapping, not %s", yamlval.Describe(v))
		return
	}
	y.fields(v, "budget", []string{"usd", "tokens", "max_attempt_usd"}, func(key string, v *yaml.Node) {
		switch key {
		case "usd":
			b.USD, _ = y.Number(v, "", "budget.usd")
		case "max_attempt_usd":
			b.MaxAttemptUSD, _ = y.Number(v, "", "budget.max_attempt_usd")
		default:
			if n, ok := y.Int(v, "", "budget.tokens", 1, yamlval.MaxInt); ok {
				b.Tokens = int64(n)
			}
		}
	})
}

// networkNeedsSandbox refuses network: none or an allow list with
// sandbox: off, written at netNode or sbNode (nil: not written in this
// file): the task could run nowhere.
func networkNeedsSandbox(y yamlFile, network, sandbox string, netNode, sbNode *yaml.Node) {
	if !yamlval.NetworkConfined(network) || sandbox != "off" || (netNode == nil && sbNode == nil) {
		return
	}
	at := cmp.Or(netNode, sbNode)
	y.Errorf(at, "remove sandbox: off, or write network: open",
		"network: %s needs the sandbox (it is what takes the network away), and sandbox is off", yamlval.NetworkWord(network))
}

// resolveRepo checks project.yaml's repo: and ref: against the repository
// itself (a git repository, with commits, where ref names a commit) and
// records the commit the author tasks start from.
func (l *loader) resolveRepo(y yamlFile, repoNode, refNode, baseNode *yaml.Node) {
	c := &l.project.Config
	switch {
	case repoNode == nil && refNode != nil:
		y.Errorf(refNode, "add repo: with the git repository, or remove ref:", "ref: is set without repo:")
		return
	case repoNode == nil:
		return
	case baseNode != nil:
		y.Errorf(baseNode, "keep repo: (the tasks start from its commit) or base: (a plain directory), not both",
			"base: and repo: both set the tasks' starting point")
		return
	}
	dir := c.Repo
	// ~ is the operator's home, as in a shell (work_dir: expands it on
	// the node the same way).
	switch {
	case dir == "~" || strings.HasPrefix(dir, "~/"):
		home, err := os.UserHomeDir()
		if err != nil {
			y.Errorf(repoNode, "set $HOME, or give an absolute path", "repo: %s: %v", c.Repo, err)
			return
		}
		dir = filepath.Join(home, dir[1:])
	case strings.HasPrefix(dir, "~"):
		y.Errorf(repoNode, "write ~/path (your home) or an absolute path", "repo: %s: only ~ and ~/ are expanded, not ~user", c.Repo)
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(l.abs, dir)
	}
	src, err := gitrepo.Resolve(context.Background(), dir, c.Ref)
	var p *gitrepo.Problem
	switch {
	case errors.As(err, &p):
		at := repoNode
		if errors.Is(err, gitrepo.ErrNoRef) && refNode != nil {
			at = refNode
		}
		y.Errorf(at, p.Fix, "%s", p.Msg)
	case err != nil:
		y.Errorf(repoNode, "check that git is installed on this machine and the repository is readable", "repo: %v", err)
	default:
		c.Source = src
	}
}

// inside checks that p names an existing directory (wantDir) or regular
// file inside the project directory and returns it cleaned.
func (l *loader) inside(y yamlFile, key string, v *yaml.Node, p string, wantDir bool) (string, bool) {
	kind := "file"
	if wantDir {
		kind = "directory"
	}
	fix := fmt.Sprintf("give a %s inside %s, relative to it", kind, l.dir)
	clean := filepath.Clean(p)
	switch {
	case strings.TrimSpace(p) == "":
		y.Errorf(v, fix, "%s is empty", key)
		return "", false
	case filepath.IsAbs(p):
		y.Errorf(v, fix, "%s must be a relative path, not %q", key, p)
		return "", false
	case clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)):
		y.Errorf(v, fix, "%s %q is outside the project directory", key, p)
		return "", false
	case clean == ".":
		y.Errorf(v, fix, "%s must name a %s inside the project directory, not the project directory itself", key, kind)
		return "", false
	}
	full := filepath.Join(l.abs, clean)
	if !l.within(full, func(msg, fix string) { y.Errorf(v, fix, "%s %q %s", key, p, msg) }) {
		return "", false
	}
	fi, err := os.Stat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		y.Errorf(v, fix, "%s %q does not exist in %s", key, p, l.dir)
		return "", false
	case err != nil:
		y.Errorf(v, "", "%s %q: %v", key, p, err)
		return "", false
	case wantDir && !fi.IsDir():
		y.Errorf(v, fix, "%s %q is not a directory", key, p)
		return "", false
	case !wantDir && !fi.Mode().IsRegular():
		y.Errorf(v, fix, "%s %q is not a regular file", key, p)
		return "", false
	}
	return filepath.ToSlash(clean), true
}

// startFrom reads a start_from: value.
func (y yamlFile) startFrom(key string, v *yaml.Node) (string, bool) {
	s, ok := y.String(v, "", key)
	if !ok {
		return "", false
	}
	if s != domain.StartInputs && s != domain.StartDependencies && s != domain.StartBase {
		y.Errorf(v, "write start_from: inputs (the default), dependencies or base",
			"%s: unknown value %q", key, s)
		return "", false
	}
	return s, true
}

// onConflict reads an on_conflict: value.
func (y yamlFile) onConflict(key string, v *yaml.Node) (string, bool) {
	s, ok := y.String(v, "", key)
	if !ok {
		return "", false
	}
	if s != domain.ConflictMarkers && s != domain.ConflictFail {
		y.Errorf(v, "write on_conflict: markers (the default: the task starts on the merge with git's conflict markers) or fail",
			"%s: unknown value %q", key, s)
		return "", false
	}
	return s, true
}

// What a git project refuses of start_from: and what a plain one refuses
// of on_conflict:, and the fixes.
const (
	inputsInRepoMsg = "start_from: inputs is for projects without repo: (a git project's task starts on its dependencies' commits)"
	inputsInRepoFix = "remove it (the default stacks the task on its dependencies' results; see docs/GIT.md), or write start_from: base"
	onConflictMsg   = "on_conflict: is for projects with repo: (a conflict between the dependencies' commits)"
	onConflictFix   = "remove it, or give the project a repository (repo: in project.yaml)"
)

// files reads a files: list: each entry a regular file inside the
// project's spec directory (relative, no "..", no link leaving it),
// returned cleaned and slash-separated, without duplicates.
func (l *loader) files(y yamlFile, key string, v *yaml.Node) []string {
	nodes := []*yaml.Node{v}
	switch v.Kind {
	case yaml.ScalarNode:
	case yaml.SequenceNode:
		nodes = v.Content
	default:
		y.Errorf(v, "write a list of paths, e.g. files: [data/input.csv]", "%s must be a list of paths, not %s", key, yamlval.Describe(v))
		return nil
	}
	out := []string{}
	for _, n := range nodes {
		n = yamlval.Resolve(n)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			y.Errorf(n, "write a list of paths, e.g. files: [data/input.csv]", "%s: each entry must be a path, not %s", key, yamlval.Describe(n))
			continue
		}
		p, ok := l.inside(y, key, n, n.Value, false)
		if !ok || !l.inProject(y, key, n, p) || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// inProject reports whether the file rel, with its links followed, stays
// in the project's spec directory: a file given to a task is copied to a
// node, so a link to another project's (or the operator's) file is
// refused, which within allows for prompts.
func (l *loader) inProject(y yamlFile, key string, n *yaml.Node, rel string) bool {
	root, err1 := evalSymlinks(l.abs)
	resolved, err2 := evalSymlinks(filepath.Join(l.abs, filepath.FromSlash(rel)))
	if err1 != nil || err2 != nil {
		return true // left to the copy, which reports it
	}
	if r, err := filepath.Rel(root, resolved); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return true
	}
	y.Errorf(n, fmt.Sprintf("copy the file into %s instead of linking to it", l.dir),
		"%s %q is a symbolic link to %s, outside the spec directory %s", key, rel, resolved, l.dir)
	return false
}

// within reports whether path, with its symbolic links followed, stays
// inside the project directory or the specs directory, which is what
// dispatch may send to a node; otherwise it reports the problem through
// bad. A specs directory may link to a shared file of another project, but
// a link to ~/.ssh/id_ed25519 would push the key to a node as a prompt.
// Paths that do not resolve are left to the read that follows. A file
// of the project directory that is no link is inside it (plain).
func (l *loader) within(path string, bad func(msg, fix string)) bool {
	abs := l.absPath(path)
	var fi fs.FileInfo
	if filepath.Dir(abs) == l.abs {
		fi, _ = os.Lstat(abs)
	}
	if l.plain(abs, fi) {
		return true
	}
	root, _, resolved, err := l.resolve(abs)
	if err != nil || root != "" {
		return true
	}
	bad(l.outsideProblem(resolved))
	return false
}

func (l *loader) loadShared() {
	path := l.path(SharedContextFile)
	text, exists, ok := l.readText(path)
	if !exists {
		return
	}
	l.shared = &sharedContext{path: path, broken: !ok}
	if !ok {
		return
	}
	l.sections = map[string]section{}
	for _, s := range parseSections(splitLines(text)) {
		key := contextKey(s.name)
		if first, dup := l.sections[key]; dup {
			l.add(path, s.line, fmt.Sprintf("duplicate section %q (first on line %d)", s.name, first.line),
				"rename or merge one of them; section names are compared case-insensitively")
			continue
		}
		l.sections[key] = s
		l.shared.names = append(l.shared.names, s.name)
	}
}

// TaskKeys are the keys a spec's front matter accepts.
var TaskKeys = []string{"type", "tool", "model", "priority", "depends_on", "timeout",
	"max_retries", "node", "tags", "context", "stall_timeout", "sandbox", "limits", "network",
	"matrix", "matrix_file", "nodes", "env", "retry_backoff", "files", "start_from", "on_conflict", "preemptible"}

// parseTask parses one task file. It returns nil when the file could not
// be read as text at all; otherwise problems are reported and the task is
// returned for the checks across tasks.
func (l *loader) parseTask(f taskFile) *parsed {
	path := l.path(f.name)
	text, _, ok := l.readText(path)
	if !ok {
		return nil
	}
	cfg := l.project.Config
	t := &Task{
		ID:         f.id,
		Slug:       f.slug,
		File:       filepath.Join(l.abs, f.name),
		Type:       cmpOr(cfg.Type, DefaultType),
		Tool:       cfg.Tool,
		Priority:   DefaultPriority,
		Timeout:    cfg.Timeout,
		Stall:      cfg.Stall,
		Sandbox:    cfg.Sandbox,
		Network:    cfg.Network,
		Limits:     cfg.Limits,
		MaxRetries: cfg.MaxRetries,
		Files:      cfg.Files,
		StartFrom:  cfg.StartFrom,
		OnConflict: cfg.OnConflict,
	}
	t.NotPreemptible = cfg.Preemptible != nil && !*cfg.Preemptible
	p := &parsed{task: t, depLines: map[string]int{}}
	var refs []item

	lines := splitLines(text)
	start := 0
	if len(lines) > 0 && isDelimiter(lines[0]) {
		end := slices.IndexFunc(lines[1:], isDelimiter)
		if end < 0 {
			l.add(path, 1, "front matter is not closed", "end the front matter with a line '---'")
			return nil
		}
		end++
		start = end + 1
		y := yamlFile{yamlval.Doc{Problems: &l.errs, File: path, Offset: 1}}
		if root := y.parse(strings.Join(lines[1:end], "\n"), "front matter"); root != nil {
			refs = l.frontMatter(y, root, p)
		}
	}

	var body []string
	var fc fence
	for i := start; i < len(lines); i++ {
		line := lines[i]
		if !fc.code(line) {
			if m := contextLine.FindStringSubmatch(line); m != nil {
				names := splitNames(m[1])
				if slices.Contains(names, "") {
					l.add(path, i+1, "@context: empty name", "write @context: name1, name2")
				}
				for _, name := range names {
					if name != "" {
						refs = append(refs, item{val: name, line: i + 1})
					}
				}
				continue
			}
		}
		if p.matrix != nil {
			l.checkPlaceholders(path, i+1, line, p.matrix)
		}
		body = append(body, line)
	}
	body = trimBlank(body)
	if len(body) == 0 {
		l.add(path, 0, "empty spec", "write the task's instructions below the front matter")
	}

	// A clone: a substring would keep the whole file's text alive for as
	// long as the task.
	t.Title = strings.Clone(title(body, f))
	p.file, p.body, p.sections = f, body, l.contexts(path, refs)
	for _, sec := range p.sections {
		t.Context = append(t.Context, sec.name)
	}
	setHash(t, body, p.sections)
	return p
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// frontMatter applies the front matter to p.task and returns its context
// names.
func (l *loader) frontMatter(y yamlFile, root *yaml.Node, p *parsed) []item {
	var refs []item
	var netNode, sbNode *yaml.Node
	y.fields(root, "front matter", TaskKeys, func(key string, v *yaml.Node) {
		switch key {
		case "context":
			refs = append(refs, y.list(key, v)...)
			return
		case "sandbox":
			sbNode = v
		case "network":
			netNode = v
		}
		if !l.taskKey(y, p, key, v) && !l.runKey(y, p.task, key, v) {
			l.fanKey(y, p, key, v)
		}
	})
	networkNeedsSandbox(y, p.task.Network, p.task.Sandbox, netNode, sbNode)
	l.checkMatrix(y, p)
	return refs
}

// taskKey applies a front matter key that says what the task is and who
// runs it where (type, tool, model, priority, depends_on, node, tags); it
// returns false for any other key.
func (l *loader) taskKey(y yamlFile, p *parsed, key string, v *yaml.Node) bool {
	t := p.task
	switch key {
	case "type":
		if s, ok := y.typ(key, v); ok {
			t.Type = s
		}
	case "tool":
		if s, ok := y.name(key, v); ok {
			t.Tool = s
		}
	case "model":
		if s, ok := y.String(v, "", key); ok {
			// The model goes into argv after a flag; a leading '-' would
			// be read as another flag.
			if s == "" || strings.HasPrefix(s, "-") || strings.IndexFunc(s, isSpaceOrControl) >= 0 {
				y.Errorf(v, "write the model name, e.g. sonnet", "model %q is not a model name: it must not be empty, start with '-' or contain spaces", s)
			} else {
				t.Model = s
			}
		}
	case "priority":
		if n, ok := y.Int(v, "", key, 1, 9); ok {
			t.Priority = n
		}
	case "depends_on":
		for _, it := range y.list(key, v) {
			if !depPattern.MatchString(it.val) {
				l.add(y.File, it.line, fmt.Sprintf("depends_on: %q is not a task ID", it.val),
					"write task IDs: a capital letter and digits, e.g. S01 (or one task of a matrix, e.g. S01.2)")
				continue
			}
			if _, dup := p.depLines[it.val]; !dup {
				p.depLines[it.val] = it.line
				t.DependsOn = append(t.DependsOn, it.val)
			}
		}
	case "node":
		if s, ok := y.name(key, v); ok {
			t.Node = s
		}
	case "tags":
		for _, it := range y.list(key, v) {
			if pr := nameProblem(it.val); pr != "" {
				l.add(y.File, it.line, fmt.Sprintf("tags: invalid tag %q: %s", it.val, pr), "tags match "+namePattern)
				continue
			}
			if !slices.Contains(t.Tags, it.val) {
				t.Tags = append(t.Tags, it.val)
			}
		}
	default:
		return false
	}
	return true
}

// runKey applies a front matter key that says how an attempt runs (its
// deadlines, sandbox, network, limits, retries, preemption) and what its
// workspace holds (files, start_from, on_conflict); it returns false for
// any other key.
func (l *loader) runKey(y yamlFile, t *Task, key string, v *yaml.Node) bool {
	switch key {
	case "timeout":
		if d, ok := y.Duration(v, "", key); ok {
			t.Timeout = d
		}
	case "stall_timeout":
		if d, ok := y.Duration(v, "", key); ok {
			t.Stall = d
		}
	case "sandbox":
		if s, ok := y.Sandbox(v, "", key); ok {
			t.Sandbox = s
		}
	case "network":
		if s, ok := y.Network(v, "", key); ok {
			t.Network = s
		}
	case "limits":
		if lim, ok := y.Limits(v, "", key); ok {
			t.Limits = lim.Over(l.project.Config.Limits)
		}
	case "max_retries":
		if n, ok := y.Int(v, "", key, 0, yamlval.MaxInt); ok {
			t.MaxRetries = &n
		}
	case "preemptible":
		if b, ok := y.Bool(v, "", key); ok {
			t.NotPreemptible = !b
		}
	case "files":
		if l.project.Config.Repo != "" {
			y.Errorf(v, filesInRepoFix, "files: is for projects without repo:")
		}
		t.Files = l.files(y, key, v)
	case "start_from":
		if s, ok := y.startFrom(key, v); ok {
			t.StartFrom = s
			if s == domain.StartInputs && l.project.Config.Repo != "" {
				y.Errorf(v, inputsInRepoFix, inputsInRepoMsg)
			}
		}
	case "on_conflict":
		if s, ok := y.onConflict(key, v); ok {
			t.OnConflict = s
			if l.project.Config.Repo == "" {
				y.Errorf(v, onConflictFix, onConflictMsg)
			}
		}
	default:
		return false
	}
	return true
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f
}

// title is the first "# " heading outside code blocks, else the slug with
// spaces, else the ID.
func title(body []string, f taskFile) string {
	var fc fence
	for _, line := range body {
		if fc.code(line) {
			continue
		}
		if h, ok := heading(line, 1); ok && h != "" {
			return h
		}
	}
	if f.slug != "" {
		return strings.ReplaceAll(f.slug, "-", " ")
	}
	return f.id
}

// contexts resolves context names to sections, each once, in order.
func (l *loader) contexts(path string, refs []item) []section {
	var out []section
	seen := map[string]bool{}
	for _, r := range refs {
		key := contextKey(r.val)
		if seen[key] {
			continue
		}
		seen[key] = true
		if s, ok := l.sections[key]; ok {
			out = append(out, s)
			continue
		}
		switch {
		case l.shared == nil:
			l.add(path, r.line, fmt.Sprintf("unknown context %q: there is no %s", r.val, SharedContextFile),
				fmt.Sprintf("create %s with a \"## %s\" section", l.path(SharedContextFile), r.val))
		case l.shared.broken:
			// Already reported on SHARED_CONTEXT.md itself.
		case len(l.shared.names) == 0:
			l.add(path, r.line, fmt.Sprintf("unknown context %q: %s has no \"## \" sections", r.val, SharedContextFile),
				fmt.Sprintf("add a \"## %s\" section to %s", r.val, l.shared.path))
		default:
			fix := fmt.Sprintf("use one of those or add a \"## %s\" section to %s", r.val, l.shared.path)
			if g := yamlval.Suggest(r.val, l.shared.names); g != "" {
				fix = fmt.Sprintf("did you mean %q? ", g) + fix
			}
			l.add(path, r.line, fmt.Sprintf("unknown context %q; %s has: %s", r.val, SharedContextFile, strings.Join(l.shared.names, ", ")), fix)
		}
	}
	return out
}

// checkDeps reports unknown dependencies and dependency cycles.
func (l *loader) checkDeps(all []*parsed, known map[string]string) {
	byID := map[string]*parsed{}
	var ids []string
	for _, p := range all {
		byID[p.task.ID] = p
	}
	for id := range known {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// The specs, not every task of their matrices.
	specIDs := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return strings.Contains(id, ".") })
	for _, p := range all {
		for _, d := range p.task.DependsOn {
			if _, ok := known[d]; !ok {
				l.add(l.path(known[p.task.ID]), p.depLines[d], fmt.Sprintf("depends_on: unknown task %s; known tasks: %s", d, strings.Join(specIDs, ", ")),
					"depend on one of the known tasks, or add a spec file for "+d)
			}
		}
	}

	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(id string)
	visit = func(id string) {
		color[id] = grey
		stack = append(stack, id)
		for _, d := range byID[id].task.DependsOn {
			if byID[d] == nil {
				continue
			}
			switch color[d] {
			case white:
				visit(d)
			case grey:
				i := slices.Index(stack, d)
				cycle := append(slices.Clone(stack[i:]), d)
				from := byID[cycle[0]]
				l.add(l.path(known[cycle[0]]), from.depLines[cycle[1]], "dependency cycle: "+strings.Join(cycle, " → "),
					"remove one of these depends_on entries")
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
	}
	for _, id := range ids {
		if byID[id] != nil && color[id] == white {
			visit(id)
		}
	}
}

// schedule reads project.yaml's schedule: one of cron (with timezone),
// every and at, and reuse; checked by package schedule, each problem at
// the line of its key.
func (y yamlFile) schedule(v *yaml.Node) *schedule.Spec {
	const example = `write schedule: {cron: "0 3 * * *"}, {every: 6h} or {at: 2026-12-01T09:00}`
	if v.Kind != yaml.MappingNode {
		y.Errorf(v, example, "schedule must be a mapping, not %s", yamlval.Describe(v))
		return nil
	}
	var sp schedule.Spec
	at := map[string]*yaml.Node{"schedule": v}
	ok := true
	y.fields(v, "schedule", []string{"cron", "timezone", "every", "at", "reuse", "max_failures"}, func(key string, n *yaml.Node) {
		at[key] = n
		var good bool
		switch key {
		case "cron":
			sp.Cron, good = y.String(n, "", "schedule.cron")
		case "timezone":
			sp.Timezone, good = y.String(n, "", "schedule.timezone")
		case "every":
			sp.Every, good = y.Duration(n, "", "schedule.every")
		case "at":
			sp.At, good = y.String(n, "", "schedule.at")
		case "reuse":
			sp.Reuse, good = y.Bool(n, "", "schedule.reuse")
		case "max_failures":
			var m int
			if m, good = y.Int(n, "", "schedule.max_failures", 0, 1000); good {
				sp.MaxFailures = &m
			}
		}
		ok = ok && good
	})
	if !ok {
		return nil
	}
	if _, err := schedule.Parse(sp, time.Local); err != nil {
		var p *schedule.Problem
		if errors.As(err, &p) {
			n := at[p.Field]
			if n == nil {
				n = v
			}
			if p.Field == "schedule" {
				y.Errorf(n, p.Fix, "%s", p.Msg)
			} else {
				y.Errorf(n, p.Fix, "schedule: %s", p.Msg)
			}
		} else {
			y.Errorf(v, example, "schedule: %v", err)
		}
		return nil
	}
	return &sp
}
