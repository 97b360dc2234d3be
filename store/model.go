package store

import "time"

// Node states (nodes.state). A node never seen has no row; the views call
// it NodeUnknown.
const (
	NodeOnline  = "online"
	NodeOffline = "offline"
	NodeUnknown = "unknown"
)

// Node is what the controller last learned about a node.
type Node struct {
	Name              string
	State             string
	LastSeen          time.Time
	OfflineSince      time.Time
	LastError         string
	OS                string
	Arch              string
	WrapperVersion    string
	MemAvailableBytes int64
	Load1             float64
	DiskFreeBytes     int64
	RTTMillis         float64
	UpdatedAt         time.Time
}

// Event is one entry of the append-only event log.
type Event struct {
	ID         int64
	Time       time.Time
	Project    string
	Task       string
	Attempt    int
	Kind       string
	FromStatus string
	ToStatus   string
	Node       string
	Message    string
}

// File is one collected output file.
type File struct {
	Project string
	Task    string
	Attempt int
	Path    string
	Size    int64
	SHA256  string
}
