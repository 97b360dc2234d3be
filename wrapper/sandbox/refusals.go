package sandbox

import "path/filepath"

// Refusals says, by name, why the sandbox of an attempt could not
// run each executable of found (ExposeTool's refusal), for the wrapper
// installed in binDir (<work_dir>/.bin, which names the work_dir the
// sandbox hides) and the node user's homes; nil for a wrapper installed
// elsewhere (a test's), which knows no work_dir.
func Refusals(found map[string]string, binDir string, homes []string) map[string]string {
	if filepath.Base(binDir) != ".bin" {
		return nil
	}
	workDir := filepath.Dir(binDir)
	out := map[string]string{}
	for name, path := range found {
		// A task directory like an attempt's, in a project no task has.
		sp := NewSpec("", filepath.Join(workDir, ".which", "tasks", "-"), workDir, homes, binDir, "")
		if err := sp.ExposeTool(path, workDir); err != nil {
			out[name] = err.Error()
		}
	}
	return out
}
