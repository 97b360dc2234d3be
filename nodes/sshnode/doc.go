// Package sshnode is the SSH client of dispatch: the nodes.Transport of a
// remote node.
//
// Env.ParseSSHTarget reads a node's ssh: value (an ssh command line,
// user@host[:port] or a Host alias of ~/.ssh/config) into an Endpoint the way
// OpenSSH would, without running ssh. SSH connects on first use, checks the
// host key against known_hosts (refusing an unknown or changed key unless
// accept-new allows it), authenticates with the agent or the identity files,
// and runs commands and SFTP transfers over one cached connection. Open picks
// the transport of a node of nodes.yaml: nodes.Local for ssh: null, else SSH.
//
// The package imports nodes for the seam it implements; nodes imports nothing
// of it.
package sshnode
