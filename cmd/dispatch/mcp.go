package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/spec"
)

// mcpCommand is `dispatch mcp`: the operator commands as the tools of an
// MCP server on stdin and stdout, for an AI agent that operates dispatch.
//
// Each tool runs this same binary (os.Executable) as the CLI command it
// stands for, with the server's --home, --config and log flags and the
// tool's arguments as argv (no shell; positional arguments after "--", so
// that an argument cannot be taken for a flag), and reads its stdout,
// stderr and exit code, under a timeout. Every check and every answer is
// then literally the CLI's: an exit 2 (usage or configuration error) is a
// tool error carrying the CLI's message and its "Try:" line, the JSON is
// the CLI's --json (--format json), and the server shares no state with
// the controller beyond what the CLI shares (the database, the control
// socket). A process per call costs a few milliseconds, nothing next to a
// task; in return a crash or a leak in a command cannot take the server
// down, and the server holds no database handle or lock of its own.
// `start` is `start --detach`: it returns once the background controller
// (or a running `dispatch serve`, which it hands the project to) has it.
func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve validate, start, status, report, logs, events, retry, cancel, stop and runs as MCP tools on stdin/stdout, for an AI agent (docs/MCP.md)",
		Action: func(c *cli.Context) error {
			e, err := newEnv(c)
			if err != nil {
				return err
			}
			if c.NArg() > 0 {
				return usagef("dispatch --home DIR mcp", "mcp takes no arguments, not %q", c.Args().First())
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the dispatch binary: %w", err)
			}
			r := &cliRunner{exe: exe, global: globalArgs(c, e), timeout: mcpCallTimeout}
			v, _ := buildVersion()
			srv := mcp.NewServer(&mcp.Implementation{Name: "dispatch", Version: v},
				&mcp.ServerOptions{Logger: e.log, Instructions: mcpInstructions})
			addMCPTools(srv, r)
			err = srv.Run(c.Context, &mcp.StdioTransport{})
			if c.Context.Err() != nil {
				// A signal ended the server: a normal end.
				return nil
			}
			return err
		},
	}
}

// mcpInstructions is what the server tells its client about itself.
const mcpInstructions = `dispatch runs a project's task specs (specs/<project>/S*.md in the dispatch home) in parallel on nodes. ` +
	`validate a project, start it (in the background), follow it with status or events (pass the cursor back), ` +
	`read logs of a task, act with retry, cancel or stop, and read the report at the end. ` +
	`Each tool runs the dispatch command of the same name; a tool error carries that command's message and its fix.`

// mcpCallTimeout bounds one tool call: its command is interrupted, then
// killed, when it takes longer (validate and logs may wait for a node).
const mcpCallTimeout = 3 * time.Minute

// mcpMaxOutput caps what a tool keeps of a command's stdout (a report of
// thousands of tasks is a few MB); what is past it is dropped and said so.
const mcpMaxOutput = 16 << 20

// cliRunner runs dispatch commands for the MCP tools.
type cliRunner struct {
	exe     string
	global  []string // --home, --config and the log flags of the server
	timeout time.Duration
}

// cliRun is what one command left: its exit code, and its stderr.
type cliRun struct {
	name   string // the command, for messages
	code   int
	stderr string
}

// run runs `dispatch <global flags> args...` with no stdin, its stdout
// written to out. It fails only when the command could not run or did
// not end in time; a non-zero exit is in the result.
func (r *cliRunner) run(ctx context.Context, out io.Writer, args ...string) (cliRun, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.exe, append(append([]string(nil), r.global...), args...)...)
	var stderr capped
	stderr.max = 1 << 20
	cmd.Stdout, cmd.Stderr = out, &stderr
	// Interrupted first, as Ctrl-C would: the command ends its own way.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	res := cliRun{name: args[0], stderr: termtext.Clean(stderr.String())}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("dispatch %s did not finish within %s (stopped); %s", res.name, r.timeout, strings.TrimSpace(res.stderr))
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		return res, fmt.Errorf("run dispatch %s: %w", res.name, err)
	}
	return res, nil
}

// output runs a command and returns its stdout; a command that did not
// exit 0 is a tool error with its message.
func (r *cliRunner) output(ctx context.Context, args ...string) ([]byte, cliRun, error) {
	var out capped
	out.max = mcpMaxOutput
	res, err := r.run(ctx, &out, args...)
	if err != nil {
		return nil, res, err
	}
	if res.code != 0 {
		return nil, res, res.failure(out.String())
	}
	if out.dropped > 0 {
		return nil, res, fmt.Errorf("dispatch %s printed more than %d MiB; ask for less (a run, a cursor)", res.name, mcpMaxOutput>>20)
	}
	return out.Bytes(), res, nil
}

// failure is a command that did not exit 0, as a tool error: what the
// command printed (its message and its "Try:" line), after what its exit
// code means.
func (r cliRun) failure(stdout string) error {
	msg := strings.TrimSpace(r.stderr)
	if out := strings.TrimSpace(termtext.Clean(stdout)); out != "" {
		msg = strings.TrimSpace(out + "\n" + msg)
	}
	what := fmt.Sprintf("exit %d", r.code)
	switch r.code {
	case 1:
		what = "exit 1: the work failed"
	case 2:
		what = "exit 2: a usage or configuration error; fix what it says, then call again"
	}
	return fmt.Errorf("dispatch %s (%s):\n%s", r.name, what, msg)
}

// notes are the lines a successful command wrote on stderr (warnings,
// notes).
func (r cliRun) notes() []string {
	var out []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// cliArgs is a command line: the command, its flags, then "--" and the
// positional arguments, which therefore can never be read as flags.
func cliArgs(command string, flags []string, positional ...string) []string {
	return append(append(append([]string{command}, flags...), "--"), positional...)
}

// intFlag appends --name v to flags when v is set.
func intFlag(flags []string, name string, v *int) []string {
	if v == nil {
		return flags
	}
	return append(flags, "--"+name, strconv.Itoa(*v))
}

// checkProject refuses a bad project name before anything runs, with the
// CLI's words.
func checkProject(tool, project string) error {
	if err := spec.ValidName(project); err != nil {
		return fmt.Errorf("dispatch %s (exit 2: a usage or configuration error; fix what it says, then call again):\ndispatch: %v\n"+
			"Try: the name of a directory of specs/ in the dispatch home", tool, err)
	}
	return nil
}

// answer is a tool's answer: text for the agent to read first, then
// data, the JSON (an object) as structured content. jsonText adds the
// JSON as a second text block too, for the clients that show only the
// text: set for the tools whose CLI command prints JSON.
type answer struct {
	text     string
	data     any
	jsonText bool
}

// addTool adds a tool whose handler answers or fails: a failure is a tool
// error (IsError) carrying its message, never a protocol error.
func addTool[In any](s *mcp.Server, name, desc string, h func(context.Context, In) (answer, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc},
		func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
			a, err := h(ctx, in)
			if err != nil {
				return nil, nil, err
			}
			res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.text}}}
			if a.jsonText {
				b, err := json.MarshalIndent(a.data, "", "  ")
				if err != nil {
					return nil, nil, err
				}
				res.Content = append(res.Content, &mcp.TextContent{Text: string(b)})
			}
			return res, a.data, nil
		})
}

// capped is a buffer that keeps the first max bytes written to it and
// counts the rest.
type capped struct {
	bytes.Buffer
	max     int
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room < len(p) {
		c.dropped += len(p) - max(room, 0)
		c.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

// tail keeps the last n lines written to it, and counts them all. A line
// longer than maxLine keeps its first maxLine bytes.
type tail struct {
	n     int
	lines []string
	part  []byte // the line being written
	total int
}

const maxLine = 16 << 10

func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.add(p)
			break
		}
		t.add(p[:i])
		t.push()
		p = p[i+1:]
	}
	return n, nil
}

func (t *tail) add(p []byte) {
	if room := maxLine - len(t.part); room > 0 {
		t.part = append(t.part, p[:min(room, len(p))]...)
	}
}

func (t *tail) push() {
	t.total++
	t.lines = append(t.lines, string(t.part))
	t.part = t.part[:0]
	if len(t.lines) > 2*t.n {
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-t.n:]...)
	}
}

// text is the last n lines, a last line without its newline included.
func (t *tail) text() string {
	if len(t.part) > 0 {
		t.push()
	}
	lines := t.lines
	if len(lines) > t.n {
		lines = lines[len(lines)-t.n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
