package sshnode

import "github.com/dispatch-tool/dispatch/nodes"

// NodeConfig is the SSH configuration of node n of cfg: keepalives a third
// of node_offline_timeout apart, so that a node silent for that long has
// its connection dropped.
func NodeConfig(cfg *nodes.Config, n nodes.Node, env Env) Config {
	return Config{Node: n.Name, Target: n.SSH, Env: env, ConnectTimeout: cfg.Controller.SSHConnectTimeout,
		StrictHostKeyChecking: n.StrictHostKeyChecking, Keepalive: KeepaliveFor(cfg.Controller.NodeOfflineTimeout)}
}

// Open returns the transport of node n: Local for ssh: null, else SSH. It
// connects nothing; a bad ssh: value is a ConfigError naming the line.
func Open(cfg *nodes.Config, n nodes.Node, env Env) (nodes.Transport, error) {
	if n.IsLocal() {
		return nodes.NewLocal(), nil
	}
	tr, err := New(NodeConfig(cfg, n, env))
	if err != nil {
		return nil, &nodes.ConfigError{File: cfg.File, Line: n.Line, Msg: "node " + n.Name + ": ssh: " + err.Error(),
			Fix: "write ssh: as an ssh command line, user@host[:port], or a Host alias of ~/.ssh/config"}
	}
	return tr, nil
}
