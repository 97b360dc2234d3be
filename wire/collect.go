package wire

// CollectRequest is the stdin of `wrapper collect`: the finished attempts
// of one node whose files the controller collects in one call. The reply
// on stdout is one tar stream: for the i-th attempt (counting from 0),
// first the entry "<i>/collect.json" (a CollectHead), then "<i>/task.log"
// when the head says LogSent, then "<i>/output/<path>" for each regular
// file of output/ when it says OutputSent; attempts in request order.
type CollectRequest struct {
	Attempts []CollectItem `json:"attempts"`
}

// CollectItem is one attempt a `wrapper collect` sends back.
type CollectItem struct {
	// Dir is the absolute task directory; the attempt is in it, or in
	// Dir/attempts/<Attempt>/ once a later attempt took the directory.
	Dir     string `json:"dir"`
	Attempt int    `json:"attempt"`
	// Output asks for output/ as well as task.log.
	Output bool `json:"output"`
	// MaxFiles and MaxBytes are the controller's quotas: an output/ of
	// more files (links counted) or more bytes of regular files is
	// listed in the head and not sent; a task.log over MaxBytes neither.
	MaxFiles int   `json:"max_files"`
	MaxBytes int64 `json:"max_bytes"`
}

// CollectHead is the entry "<i>/collect.json" of a collect stream: what
// the node found of the attempt before sending its files.
type CollectHead struct {
	// Found is false when neither Dir nor Dir/attempts/<n>/ holds a
	// status.json of the attempt: nothing else is sent for it.
	Found bool `json:"found"`
	// Moved is set when the attempt's files are in Dir/attempts/<n>/.
	Moved bool `json:"moved,omitempty"`
	// Log is the state of task.log (one of the Collect* words), LogSize
	// its size.
	Log     string `json:"log"`
	LogSize int64  `json:"log_size"`
	// Output is the state of output/; Files counts its regular files and
	// links, Bytes the size of its regular files.
	Output string `json:"output,omitempty"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	// Error says what went wrong reading the attempt (state CollectError).
	Error string `json:"error,omitempty"`
}

// The states of a task.log or an output/ in a CollectHead.
const (
	CollectSent        = "sent"         // its content follows
	CollectMissing     = "missing"      // it does not exist
	CollectNotFollowed = "not_followed" // a link or a special file: never read
	CollectOverQuota   = "over_quota"   // over MaxFiles or MaxBytes: not sent
	CollectError       = "error"        // it could not be read (Error says why)
)

// CollectErrorName is the entry, under "<i>/", that ends an attempt whose
// files failed while they were sent (a file that shrank): its content
// says why, and the controller drops what it received of the attempt.
const CollectErrorName = "collect.err"

// CollectEndName is the entry, under "<i>/", that ends an attempt whose
// files were all sent, a CollectEnd (empty from wrappers before it had
// one): a stream cut before it (the transport, a wrapper that died) can
// end as a whole archive does, and without it the controller collects the
// attempt again.
const CollectEndName = "collect.end"

// CollectEnd is the content of an attempt's end entry: the output/ files
// and bytes sent, and the files that changed between the listing the head
// counted and their sending (a process the task left behind still writing
// there). What is sent is the listing: a file that grew is sent up to its
// listed size, one removed or no longer a regular file is not sent, one
// made after the listing is not seen. task.log is sent as the head's
// LogSize counted it, as well, or as it is when shorter.
type CollectEnd struct {
	Files   int             `json:"files"`
	Bytes   int64           `json:"bytes"`
	Changed []CollectChange `json:"changed,omitempty"`
	// More counts the changed files past CollectMaxChanged, not named.
	More int `json:"more,omitempty"`
	// LogGrew is how much task.log had grown past the head's LogSize
	// when it was sent: its first LogSize bytes were sent, the rest stays
	// on the node.
	LogGrew int64 `json:"log_grew,omitempty"`
	// LogShrank is how many bytes short of the head's LogSize task.log
	// was when it was sent (truncated since): what it held then was sent.
	LogShrank int64 `json:"log_shrank,omitempty"`
}

// CollectMaxChanged bounds the changed files a CollectEnd names, so that
// it stays small whatever a leftover process does to output/.
const CollectMaxChanged = 10

// Change adds c to the changed files, or counts it in More past
// CollectMaxChanged.
func (e *CollectEnd) Change(c CollectChange) {
	if len(e.Changed) < CollectMaxChanged {
		e.Changed = append(e.Changed, c)
		return
	}
	e.More++
}

// CollectChange is one file of output/ that changed after the listing:
// its size listed and when it was sent (-1: removed, or no longer a
// regular file; not sent).
type CollectChange struct {
	Path   string `json:"path"`
	Listed int64  `json:"listed"`
	Now    int64  `json:"now"`
}

// CollectHeadName is the name of an attempt's head in a collect stream,
// under "<i>/".
const CollectHeadName = "collect.json"
