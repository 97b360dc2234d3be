package proc

import (
	"encoding/json"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// A work_dir that two nodes reach (two names of one host, or a home
// shared over NFS) holds the attempts of both. Each attempt is its node's:
// the one launch.json names (the controller writes it before each attempt)
// and, once its supervisor started, the one its process record names.
// `status`, `watch` and `kill` given --node report, stream and signal only
// that node's attempts, so that one node's controller never judges, nor
// kills, the attempt of another as a stale one of its own. An attempt whose
// node is unknown (no launch.json yet) is every node's, as before nodes
// were named.

// launchNode is the part of launch.json that names the attempt's node.
type launchNode struct {
	Node string `json:"node"`
}

// TaskNode returns the node launch.json of dir names, or "" when there is
// no readable launch.json or it names none.
func TaskNode(dir string) string {
	data, err := taskfiles.ReadControlFileMax(filepath.Join(dir, taskfiles.FileLaunch), taskfiles.MaxLaunchFile)
	if err != nil {
		return ""
	}
	var l launchNode
	if json.Unmarshal(data, &l) != nil {
		return ""
	}
	return l.Node
}

// OthersTask reports whether dir holds the attempt of a node other than
// node; every attempt is node's when node is "" (a call for any node).
func OthersTask(node, dir string) bool {
	if node == "" {
		return false
	}
	n := TaskNode(dir)
	return n != "" && n != node
}

// RecordNode returns the node that dir's last attempt ran for: its process
// record's (written by the supervisor, out of a sandboxed task's reach),
// else launch.json's for a record of a wrapper that did not keep it.
func RecordNode(dir string) string {
	if rec, err := ReadRecord(dir); err == nil && rec.Node != "" {
		return rec.Node
	}
	return TaskNode(dir)
}
