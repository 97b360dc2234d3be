package store

// Node states (nodes.state). A node never seen has no row; the views call
// it NodeUnknown.
const (
	NodeOnline  = "online"
	NodeOffline = "offline"
	NodeUnknown = "unknown"
)
