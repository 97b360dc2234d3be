package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/spec"
	"github.com/dispatch-tool/dispatch/store"
)

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "home", Usage: "dispatch home `DIR` (nodes.yaml, specs/, dispatch.db, runs/)", EnvVars: []string{"DISPATCH_HOME"}, Value: "."},
		&cli.StringFlag{Name: "config", Usage: "nodes.yaml `FILE` (default: <home>/nodes.yaml)"},
		&cli.StringFlag{Name: "log-format", Usage: "controller log format on stderr: text or json", Value: "text"},
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "warn"},
		&cli.BoolFlag{Name: "no-color", Usage: "plain output even on a terminal"},
		&cli.BoolFlag{Name: "version", Usage: "print the version, the commit and the wrapper version (like dispatch version)"},
	}
}

// env is what every command resolves from the global flags.
type env struct {
	home   string
	config string
	log    *slog.Logger
	out    io.Writer
	errOut io.Writer
	tty    bool
	styles styles
}

func newEnv(c *cli.Context) (*env, error) {
	homeDir, err := filepath.Abs(c.String("home"))
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(homeDir); err != nil || !fi.IsDir() {
		return nil, usagef("dispatch --home DIR ...", "home %s is not a directory", homeDir)
	}
	cfg := c.String("config")
	if cfg == "" {
		cfg = home.ConfigPath(homeDir)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, usagef("--log-level info", "unknown log level %q: use debug, info, warn or error", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch c.String("log-format") {
	case "text":
		h = slog.NewTextHandler(c.App.ErrWriter, opts)
	case "json":
		h = slog.NewJSONHandler(c.App.ErrWriter, opts)
	default:
		return nil, usagef("--log-format json", "unknown log format %q: use text or json", c.String("log-format"))
	}
	e := &env{home: homeDir, config: cfg, log: slog.New(h), out: c.App.Writer, errOut: c.App.ErrWriter}
	if f, ok := c.App.Writer.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		e.tty = true
	}
	color := e.tty && !c.Bool("no-color") && os.Getenv("NO_COLOR") == ""
	e.styles = newStyles(color)
	return e, nil
}

// writePrivate writes a file only its owner can read (0600), whatever the
// umask and whatever mode the file had.
func writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (e *env) specsDir() string { return home.SpecsDir(e.home) }
func (e *env) dbPath() string   { return home.DBPath(e.home) }

func (e *env) loadConfig() (*nodes.Config, error) {
	return nodes.Load(e.config)
}

// loadProject checks the project name, then loads and validates its specs.
func (e *env) loadProject(name string) (*spec.Project, error) {
	return spec.Load(e.specsDir(), name)
}

// openReadOnly opens the database for a read-only command, once its
// schema is whole (see waitReady).
func (e *env) openReadOnly(ctx context.Context) (*store.Store, error) {
	st, err := e.openIfAny(ctx)
	if err == nil && st == nil {
		return nil, e.noDatabase()
	}
	return st, err
}

func (e *env) noDatabase() error {
	return fmt.Errorf("no project has been started in %s yet (%w)\nTry: dispatch start <project>", e.home, store.ErrNoDatabase)
}

// openToUpgrade opens the database read-only for a command that goes on
// to open it for writing (store.Open, which applies the migrations it
// lacks): its schema may be behind, and the command makes it whole.
func (e *env) openToUpgrade(ctx context.Context) (*store.Store, error) {
	st, err := store.OpenReadOnly(ctx, e.dbPath())
	if errors.Is(err, store.ErrNoDatabase) {
		return nil, e.noDatabase()
	}
	return st, err
}

// openIfAny is openReadOnly for a command that also works without a
// database: nil, nil when there is none yet.
func (e *env) openIfAny(ctx context.Context) (*store.Store, error) {
	st, err := store.OpenReadOnly(ctx, e.dbPath())
	if errors.Is(err, store.ErrNoDatabase) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, st, readyWait(), readyPoll, e.errOut, func() bool { return home.ControllerMayRun(e.home) }); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// defaultReadyWait bounds how long a read-only command waits for a
// database a controller is making (the first start makes the file, then
// applies its migrations, well within a second) or upgrading.
const defaultReadyWait = 10 * time.Second

// readyPoll is how often a command that waits for the database looks again.
const readyPoll = 25 * time.Millisecond

// envReadyWait shortens defaultReadyWait, for the test of a database that
// never becomes whole.
const envReadyWait = "DISPATCH_TEST_READY_WAIT"

// readyWait is defaultReadyWait, or what envReadyWait says.
func readyWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envReadyWait)); err == nil && d > 0 {
		return d
	}
	return defaultReadyWait
}

// waitReady returns once st's schema is whole (store.Ready): its queries
// would fail on a missing table ("no such table: events") in the instant
// the first start makes the database. It says on errOut that it waits, and
// gives up after wait with what is wrong and what to do. A schema behind
// this dispatch's is waited for only while a controller may be upgrading
// it (controllerMayRun): with none, an older dispatch made it, and
// nothing will change it.
func waitReady(ctx context.Context, st *store.Store, wait, poll time.Duration, errOut io.Writer, controllerMayRun func() bool) error {
	err := st.Ready(ctx)
	if !errors.Is(err, store.ErrNotReady) {
		return err
	}
	if errors.Is(err, store.ErrSchemaBehind) && !controllerMayRun() && !mayRunAfter(ctx, poll, controllerMayRun) {
		return fmt.Errorf("%w\nNo controller runs on this home. Try: dispatch start <project> upgrades the database; then run this command again", err)
	}
	fmt.Fprintf(errOut, "note: waiting up to %s for the database: %v\n", wait, err)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w (waited %s)\nTry: dispatch start <project> makes or upgrades the database; then run this command again", err, wait)
		case <-tick.C:
		}
		if err = st.Ready(ctx); !errors.Is(err, store.ErrNotReady) {
			return err
		}
	}
}

// mayRunAfter looks again after poll: a start takes the home's lock a
// moment before it writes its holder line, which names the last holder
// until then.
func mayRunAfter(ctx context.Context, poll time.Duration, controllerMayRun func() bool) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(poll):
	}
	return controllerMayRun()
}

// projectArg returns the single project argument of a command.
func projectArg(c *cli.Context, usage string) (string, error) {
	switch c.NArg() {
	case 0:
		return "", usagef(usage, "missing project name")
	case 1:
	default:
		return "", usagef(usage, "unexpected arguments: %s", strings.Join(c.Args().Slice()[1:], " "))
	}
	name := c.Args().First()
	if err := spec.ValidName(name); err != nil {
		return "", &usageError{err: err, hint: usage}
	}
	return name, nil
}

// knownProject fails with the list of started projects when name is not one.
func knownProject(ctx context.Context, st *store.Store, name string) error {
	if _, err := st.Project(ctx, name); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	ps, err := st.Projects(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	known := "none"
	if len(names) > 0 {
		known = strings.Join(names, ", ")
	}
	return fmt.Errorf("project %q has not been started (started projects: %s): %w\nTry: dispatch start %s", name, known, store.ErrNotFound, name)
}

// projectCommand completes cmd as a command on one project of the home:
// its one argument is the project's name, checked; synopsis is the usage
// line its errors show. run gets the environment and the name.
func projectCommand(cmd *cli.Command, synopsis string, run func(c *cli.Context, e *env, project string) error) *cli.Command {
	cmd.ArgsUsage = "<project>"
	cmd.Action = func(c *cli.Context) error {
		e, err := newEnv(c)
		if err != nil {
			return err
		}
		project, err := projectArg(c, synopsis)
		if err != nil {
			return err
		}
		return run(c, e, project)
	}
	return cmd
}

// readCommand completes cmd as a read-only command on one started project:
// as projectCommand, with the database opened read-only (see openProject)
// for run, and closed after it.
func readCommand(cmd *cli.Command, synopsis string, run func(c *cli.Context, e *env, st *store.Store, project string) error) *cli.Command {
	return projectCommand(cmd, synopsis, func(c *cli.Context, e *env, project string) error {
		st, err := e.openProject(c.Context, project)
		if err != nil {
			return err
		}
		defer st.Close()
		return run(c, e, st, project)
	})
}

// openProject opens the database read-only and checks that project is
// known to it. The caller closes the store.
func (e *env) openProject(ctx context.Context, project string) (*store.Store, error) {
	st, err := e.openReadOnly(ctx)
	if err != nil {
		return nil, err
	}
	if err := knownProject(ctx, st, project); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// runFlag is --run of the commands that show one run of a project.
func runFlag() cli.Flag {
	return &cli.IntFlag{Name: "run", Usage: "show run `N` of the project (default: the latest; dispatch runs lists them)"}
}

// atRun returns st reading the run that --run names (the latest without it).
func atRun(c *cli.Context, st *store.Store, project, usage string) (*store.Store, error) {
	n := c.Int("run")
	if c.IsSet("run") && n < 1 {
		return nil, usagef(usage, "--run takes a run number, 1 or more, not %d", n)
	}
	at, _, err := st.AtRun(c.Context, project, n)
	var re *store.RunRangeError
	if errors.As(err, &re) {
		return nil, usagef("dispatch runs "+project, "%v", err)
	}
	return at, err
}
