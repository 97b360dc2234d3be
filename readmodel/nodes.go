package readmodel

import (
	"context"
	"time"

	"github.com/dispatch-tool/dispatch/store"
)

// NodesView is `dispatch nodes --json` and the API's /api/v1/nodes.
type NodesView struct {
	Nodes []NodeListEntry `json:"nodes"`
	// Controller is whether a controller runs (set by the caller): when
	// none does, each node's state is what it was at its last_seen.
	Controller *ControllerView `json:"controller,omitempty"`
}

// NodeListEntry is one node of nodes.yaml with what the controller last
// learned of it.
type NodeListEntry struct {
	Name              string  `json:"name"`
	Address           string  `json:"address"`
	State             string  `json:"state"`
	Slots             int     `json:"slots"`
	Running           int     `json:"running"`
	MemAvailableBytes int64   `json:"mem_available_bytes"`
	Load1             float64 `json:"load1"`
	DiskFreeBytes     int64   `json:"disk_free_bytes"`
	OS                string  `json:"os"`
	Arch              string  `json:"arch"`
	WrapperVersion    string  `json:"wrapper_version"`
	RTTMillis         float64 `json:"rtt_ms"`
	LastSeen          string  `json:"last_seen"`
	LastError         string  `json:"last_error"`
	// Sandbox is the node's sandbox: setting (on, auto, off).
	Sandbox string `json:"sandbox"`
}

// NodeList lists the nodes of cfg with the facts st holds of them and the
// tasks running on each; st may be nil (no project started yet).
func NodeList(ctx context.Context, st *store.Store, cfg Nodes) (*NodesView, error) {
	known := map[string]store.Node{}
	running := map[string]int{}
	if st != nil {
		ns, err := st.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			known[n.Name] = n
		}
		ps, err := st.Projects(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			states, err := st.NodeTasks(ctx, p.Name)
			if err != nil {
				return nil, err
			}
			for node, n := range states {
				running[node] += n
			}
		}
	}
	v := &NodesView{Nodes: []NodeListEntry{}}
	for _, n := range cfg.NodeSlots() {
		k := known[n.Name]
		state := k.State
		if state == "" {
			state = store.NodeUnknown
		}
		v.Nodes = append(v.Nodes, NodeListEntry{Name: n.Name, Address: n.Address, State: state, Slots: n.Slots, Running: running[n.Name],
			MemAvailableBytes: k.MemAvailableBytes, Load1: k.Load1, DiskFreeBytes: k.DiskFreeBytes, OS: k.OS, Arch: k.Arch,
			WrapperVersion: k.WrapperVersion, RTTMillis: k.RTTMillis, LastSeen: jsonTime(k.LastSeen), LastError: k.LastError,
			Sandbox: n.Sandbox})
	}
	return v, nil
}

// EventView is one event as `dispatch events --json` prints it and the
// API's event stream sends it.
type EventView struct {
	ID      int64  `json:"id"`
	Time    string `json:"time"`
	Project string `json:"project"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	Kind    string `json:"kind"`
	From    string `json:"from"`
	To      string `json:"to"`
	Node    string `json:"node"`
	Message string `json:"message"`
}

// Event is ev as EventView.
func Event(ev store.Event) EventView {
	return EventView{ID: ev.ID, Time: ev.Time.UTC().Format(time.RFC3339Nano), Project: ev.Project, Task: ev.Task,
		Attempt: ev.Attempt, Kind: ev.Kind, From: ev.FromStatus, To: ev.ToStatus, Node: ev.Node, Message: ev.Message}
}
