package launchfile

import (
	"encoding/json"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
	"github.com/dispatch-tool/dispatch/wrapper/nodestatus"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// WriteAttempt writes spec.md, launch.json and the live marker of
// the attempt whose lock is held.
func WriteAttempt(dir string, item wire.LaunchItem, attempt int) error {
	launchJSON, err := json.MarshalIndent(item.Launch, "", "  ")
	if err != nil {
		return &errkind.Error{Kind: wire.KindInternal, Err: err}
	}
	// Written whole or not at all, replacing whatever the task left at
	// these names (a link is replaced, never followed).
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileSpec), []byte(item.Spec), 0o444); err != nil {
		return errkind.IO(err)
	}
	if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileLaunch), launchJSON, 0o644); err != nil {
		return errkind.IO(err)
	}
	// Before the supervisor starts, so that no moment of the attempt's
	// life is out of the live index.
	if err := nodestatus.MarkLive(dir, attempt); err != nil {
		return errkind.IO(err)
	}
	return nil
}
