package readmodel

import (
	"cmp"
	"slices"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
)

// RefreshView is what `status --refresh` adds to a project's status: what
// each node says now of the project's attempts, beside what the database
// last recorded. It is read without the home's lock and writes nothing;
// the next controller records it.
type RefreshView struct {
	AskedAt string        `json:"asked_at"`
	Nodes   []RefreshNode `json:"nodes"`
	// Tasks are the tasks a node knows an attempt of, and the tasks the
	// database has live (claimed, running), the project's order.
	Tasks []RefreshTask `json:"tasks"`
}

// RefreshNode is one node asked: how many of the project's attempts it
// holds, or why it could not be asked.
type RefreshNode struct {
	Name     string `json:"name"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// RefreshTask is one task: the database's view and the node's latest
// attempt of it.
type RefreshTask struct {
	ID       string        `json:"id"`
	Database domain.Status `json:"database"`
	Node     string        `json:"node"`
	Attempt  int           `json:"attempt"`
	// OnNode is the attempt's state on the node: running, completed,
	// failed, killed; "ended" for a supervisor gone without a final
	// status; "unknown" when the node could not be asked; "none" when the
	// node holds no attempt of the task.
	OnNode   string `json:"on_node"`
	ExitCode int    `json:"exit_code"`
	EndedAt  string `json:"ended_at,omitempty"`
	// Differs is set when the node says the attempt ended (or holds none)
	// while the database still has it live, or the other way round: what
	// the next controller will collect.
	Differs bool `json:"differs"`
}

// NodeAnswer is what one node said (or the error asking it).
type NodeAnswer struct {
	Node     string
	Attempts []NodeAttempt
	Err      error
}

// NodeAttempt is one attempt as a node's wrapper reports it (wire.Status
// and whether its supervisor lives), in the words the views need.
type NodeAttempt struct {
	Project, Task string
	Attempt       int
	// Status is the attempt's status.json: running, completed, failed,
	// killed.
	Status      string
	Alive       bool
	ExitCode    int
	CompletedAt string
}

// The attempt states a wrapper reports (wire's Status* words).
const (
	onNodeRunning   = "running"
	onNodeCompleted = "completed"
	onNodeFailed    = "failed"
	onNodeKilled    = "killed"
)

// Refresh compares the database's view v with the nodes' answers: pure,
// so that it is table-tested without nodes.
func Refresh(v *StatusView, answers []NodeAnswer, asked time.Time) *RefreshView {
	r := &RefreshView{AskedAt: jsonTime(asked), Nodes: []RefreshNode{}, Tasks: []RefreshTask{}}
	latest := map[string]RefreshTask{} // task ID → the node's latest attempt
	failed := map[string]bool{}
	for _, a := range answers {
		n := RefreshNode{Name: a.Node}
		if a.Err != nil {
			n.Error, failed[a.Node] = a.Err.Error(), true
		}
		for _, at := range a.Attempts {
			if at.Project != v.Project {
				continue
			}
			n.Attempts++
			t := RefreshTask{ID: at.Task, Node: a.Node, Attempt: at.Attempt, OnNode: at.Status,
				ExitCode: at.ExitCode, EndedAt: at.CompletedAt}
			switch {
			case t.OnNode == onNodeRunning && !at.Alive:
				t.OnNode = "ended"
			case t.OnNode != onNodeRunning && t.OnNode != onNodeCompleted && t.OnNode != onNodeFailed && t.OnNode != onNodeKilled:
				t.OnNode = "unknown" // a node's word outside the protocol is not repeated
			}
			if old, ok := latest[t.ID]; !ok || t.Attempt > old.Attempt {
				latest[t.ID] = t
			}
		}
		r.Nodes = append(r.Nodes, n)
	}
	for _, tv := range v.Tasks {
		live := tv.Status == domain.Running || tv.Status == domain.Claimed
		t, onNode := latest[tv.ID]
		switch {
		case onNode && (t.Node == tv.Node || !live):
		case !live:
			continue
		case failed[tv.Node]:
			t = RefreshTask{ID: tv.ID, Node: tv.Node, Attempt: tv.Attempt, OnNode: "unknown"}
		default:
			t = RefreshTask{ID: tv.ID, Node: tv.Node, Attempt: tv.Attempt, OnNode: "none"}
		}
		t.Database = tv.Status
		nodeLive := t.OnNode == onNodeRunning
		t.Differs = t.OnNode != "unknown" && (live != nodeLive || (live && t.Attempt != tv.Attempt))
		r.Tasks = append(r.Tasks, t)
	}
	slices.SortStableFunc(r.Nodes, func(a, b RefreshNode) int { return cmp.Compare(a.Name, b.Name) })
	return r
}
