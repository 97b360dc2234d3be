package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/schedule"
)

// Scheduled is a project whose project.yaml has a schedule:.
type Scheduled struct {
	Name     string
	Schedule schedule.Spec
}

// LoadSchedules reads the schedule: of every project under specsDir from
// its project.yaml alone (not its specs, which may be thousands), for
// `dispatch serve` and `dispatch schedule`. A project whose schedule: is
// wrong is in bad, with what is wrong; its other keys are not checked
// here (validate and start check them).
func LoadSchedules(specsDir string) (found []Scheduled, bad map[string]error, err error) {
	names, err := Projects(specsDir)
	if err != nil {
		return nil, nil, err
	}
	bad = map[string]error{}
	for _, name := range names {
		sp, err := loadSchedule(specsDir, name)
		switch {
		case err != nil:
			bad[name] = err
		case sp != nil:
			found = append(found, Scheduled{Name: name, Schedule: *sp})
		}
	}
	return found, bad, nil
}

// LoadSchedule reads one project's schedule: (nil when it has none).
func LoadSchedule(specsDir, name string) (*schedule.Spec, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("project name: %w", err)
	}
	if fi, err := os.Stat(filepath.Join(specsDir, name)); err != nil || !fi.IsDir() {
		known, err := Projects(specsDir)
		if err != nil {
			return nil, err
		}
		return nil, &UnknownProjectError{Name: name, SpecsDir: specsDir, Known: known}
	}
	return loadSchedule(specsDir, name)
}

func loadSchedule(specsDir, name string) (*schedule.Spec, error) {
	dir := filepath.Join(specsDir, name)
	l := &loader{dir: dir, abs: dir, project: &Project{Name: name, Dir: dir}}
	path := l.path(ConfigFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	text, _, ok := l.readText(path)
	var sp *schedule.Spec
	if ok {
		y := yamlFile{yamlval.Doc{Problems: &l.errs, File: path}}
		if root := y.parse(text, ConfigFile); root != nil {
			for i := 0; i+1 < len(root.Content); i += 2 {
				if yamlval.Resolve(root.Content[i]).Value == "schedule" {
					sp = y.schedule(yamlval.Resolve(root.Content[i+1]))
				}
			}
		}
	}
	if len(l.errs) > 0 {
		l.errs.Sort()
		return nil, l.errs
	}
	return sp, nil
}
