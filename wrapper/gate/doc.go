// Package gate owns running launch.json's gate on an attempt's result on a
// node: a fresh copy of the result (a checkout of the result commit, or a
// copy of output/ identified by its digest), a tree gated before answered
// from the launch's known results (Known), then the launch's setup and the
// gate command under the attempt's sandbox (Spec: the copy writable, the
// gate's own HOME and TMPDIR) and limits within the gate's timeout (Run),
// and what the result says of each step (stepVerdict, pure and
// table-tested) and in status.json (ForStatus).
//
// It starts processes only through Attempt.Start, the supervisor's, so that
// the attempt's limits, watchdog and kill reach the gate too. It does not
// decide what a failed gate does to the attempt (the supervisor does). It
// imports wire, internal/filetree and the wrapper packages gitresult,
// limits, proc, sandbox, taskfiles and tree.
package gate
