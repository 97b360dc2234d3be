package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/policy"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wire"
)

// eventInputs is the event of a launch that receives its dependencies'
// outputs: where each came from.
const eventInputs = "inputs"

// depOutput is what the controller knows of a dependency's collected
// output: the attempt, the node it ran on and the manifest recorded when
// it was collected.
type depOutput struct {
	node    string
	attempt int
	// collected is set when the attempt's collection recorded files (the
	// manifest below is that attempt's, possibly empty).
	collected bool
	files     []store.File
}

// splitInputs decides where each dependency's output in deps comes from
// for a dependent launching on node: copied on the node (local) when the
// dependency's collected attempt ran there, else sent from the
// controller's collected copy (pushed). Each keeps the order of deps.
func splitInputs(deps []string, node string, outs map[string]depOutput) (local, pushed []string) {
	for _, d := range deps {
		o, ok := outs[d]
		if ok && o.collected && o.node == node && o.attempt > 0 {
			local = append(local, d)
		} else {
			pushed = append(pushed, d)
		}
	}
	return local, pushed
}

// depOutputs reads what depOutput holds for each of deps.
func (c *Controller) depOutputs(ctx context.Context, project string, deps []string) (map[string]depOutput, error) {
	outs := map[string]depOutput{}
	for _, d := range deps {
		t, err := c.st.Task(ctx, project, d)
		if err != nil {
			return nil, err
		}
		runs, err := c.st.Attempts(ctx, project, d)
		if err != nil {
			return nil, err
		}
		files, err := c.st.Files(ctx, project, d)
		if err != nil {
			return nil, err
		}
		o := depOutput{attempt: t.Attempt, files: files}
		for _, r := range runs {
			if r.Attempt == t.Attempt {
				o.node, o.collected = r.Node, !r.CollectedAt.IsZero()
			}
		}
		for _, f := range files {
			o.collected = o.collected && f.Attempt == t.Attempt
		}
		outs[d] = o
	}
	return outs, nil
}

// sendInputs fills the task directory's inputs/ (dest) on out's node with
// the dependencies' outputs of inputs (one Dirs entry per dependency, at
// its ID): those whose collected attempt ran on this node are copied there
// by `wrapper inputs`, checked against the manifest; the rest, and any the
// node could not copy as collected, are pushed from the controller's
// collected copy. false means the outcome is decided (an error).
func (c *Controller) sendInputs(ctx context.Context, out *launchOutcome, inst *nodes.Installed, log *slog.Logger, inputs tree, dest string) bool {
	t, n := out.claim.task, out.claim.node
	var deps []string
	for _, d := range inputs.Dirs {
		deps = append(deps, d.Prefix)
	}
	outs, err := c.depOutputs(ctx, t.Project, deps)
	if err != nil {
		out.err = err
		return false
	}
	local, pushed := splitInputs(deps, n.cfg.Name, outs)
	var notes []string
	copied := map[string]bool{}
	if len(local) > 0 {
		reply, err := c.copyInputs(ctx, n, inst, t.Project, dest, local, outs)
		for _, d := range local {
			switch {
			case err != nil:
				notes = append(notes, fmt.Sprintf("%s sent from the controller (the node could not copy it: %v)", d, err))
			case slices.Contains(reply.Copied, d):
				copied[d] = true
				notes = append(notes, fmt.Sprintf("%s copied on the node from its attempt %d", d, outs[d].attempt))
			default:
				notes = append(notes, fmt.Sprintf("%s sent from the controller (its files on the node are not the collected ones: %s)", d, reply.Failed[d]))
			}
		}
		if err != nil {
			log.Warn("copy inputs on the node", "err", err)
		}
	}
	rest := tree{ReadOnly: true}
	for _, d := range inputs.Dirs {
		if !copied[d.Prefix] {
			rest.Dirs = append(rest.Dirs, d)
		}
	}
	if len(pushed) > 0 {
		notes = append(notes, strings.Join(pushed, ", ")+" sent from the controller")
	}
	out.inputsNote = "inputs: " + strings.Join(notes, "; ")
	if len(rest.Dirs) == 0 {
		return true
	}
	// After a node copy, the push adds its directories beside them.
	merge := len(copied) > 0
	return c.tryPush(ctx, n, log, []*launchOutcome{out}, "push the inputs", func() error {
		return c.pushTree(ctx, n, inst, rest, dest, merge)
	})
}

// copyInputs asks the wrapper to copy the outputs of local (dependencies
// that ran on n) into dest, replacing it.
func (c *Controller) copyInputs(ctx context.Context, n *nodeRuntime, inst *nodes.Installed, project, dest string, local []string, outs map[string]depOutput) (wire.InputsReply, error) {
	var req wire.InputsRequest
	var size int64
	for _, d := range local {
		in := wire.NodeInput{Name: d, Dir: taskDir(inst, project, d), Attempt: outs[d].attempt, Files: []wire.InputFile{}}
		for _, f := range outs[d].files {
			in.Files = append(in.Files, wire.InputFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
			size += f.Size
		}
		req.Copy = append(req.Copy, in)
	}
	var reply wire.InputsReply
	doc, err := json.Marshal(req)
	if err != nil {
		return reply, err
	}
	// Copying is local to the node: its deadline grows with the bytes.
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout()+transferAllowance(size))
	defer cancel()
	res, err := n.tr.Exec(cctx, []string{inst.Path, "inputs", "--dir", dest}, doc)
	if err != nil {
		return reply, err
	}
	if res.ExitCode != 0 {
		return reply, errors.New(policy.ReplyError(res, nil))
	}
	if err := json.Unmarshal(res.Stdout, &reply); err != nil {
		return reply, fmt.Errorf("wrapper inputs: a reply not understood: %w", err)
	}
	return reply, nil
}

// transferAllowance is the time a node's own copy of size bytes may take
// beyond a call's deadline (4 MiB/s at least, as for an untar).
func transferAllowance(size int64) time.Duration {
	return time.Duration(size/(4<<20)) * time.Second
}
