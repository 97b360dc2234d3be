package controller

import (
	"github.com/dispatch-tool/dispatch/controller/executor"
	"github.com/dispatch-tool/dispatch/nodes"
)

// newExecutor returns the executor of node cfg over tr: where its attempts
// start, are watched and are killed (package controller/executor). A
// node with slurm: runs each attempt as a batch job (executor.Slurm, which
// keeps the wrapper executor for the status files); every other node is a
// wrapper node. The executor belongs to the
// node's connection (nodeConn): a reload that keeps the connection keeps
// it, and it is closed with the connection.
func (c *Controller) newExecutor(cfg nodes.Node, tr nodes.Transport) executor.Executor {
	w := executor.NewWrapper(tr, cfg.Name, c.callTimeout)
	w.BeforeRun = func(bin string, doc []byte) {
		if testHookBeforeLaunch != nil {
			testHookBeforeLaunch(cfg.Name, bin, doc)
		}
	}
	if cfg.Slurm != nil {
		return executor.NewSlurm(cfg, tr, w, c.callTimeout, c.opts.Home)
	}
	return w
}

// newNodeRuntime returns the runtime of node cfg, reached over tr.
func (c *Controller) newNodeRuntime(cfg nodes.Node, tr nodes.Transport) *nodeRuntime {
	conn := &nodeConn{tr: tr, name: cfg.Name, checked: make(chan struct{}, 1), exec: c.newExecutor(cfg, tr)}
	return &nodeRuntime{cfg: cfg, nodeConn: conn}
}
