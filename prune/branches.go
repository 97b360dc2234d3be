package prune

import (
	"slices"
	"sort"

	"github.com/dispatch-tool/dispatch/gitrepo"
)

// BranchRun is what a run of a git-native project recorded of the
// branches it set in the operator's repository, as DecideBranches weighs
// it.
type BranchRun struct {
	N    int
	Repo string // the operator's repository (its git directory); "" for a project without one
	// Final is the commit of the run's result, dispatch/<p>/final; "" when
	// it set none.
	Final string
	// Tasks are the run's task IDs, each with the commits its attempts
	// recorded (what dispatch/<p>/<ID> was set to).
	Tasks map[string][]string
	// Bases are the commits the run's tasks started from.
	Bases []string
}

// Branch is a ref of the operator's repository a prune deletes, if it
// still points at Commit.
type Branch struct {
	Repo, Ref, Commit string
}

// TaskRef is the ref of task id's branch in project.
func TaskRef(project, id string) string { return gitrepo.RefPrefix + project + "/" + id }

// FinalRef is the ref of project's result.
func FinalRef(project string) string { return gitrepo.RefPrefix + project + "/final" }

// DecideBranches returns the branches of project in repo that go with the
// runs gone, refs being the repository's refs under dispatch/<project>/
// with their commits. dispatch/<p>/<ID> goes when ID is a task of a run
// that goes and of no run that stays (the current one included), and the
// branch points at a commit a run that goes recorded for it;
// dispatch/<p>/final when it points at the result of a run that goes and
// at no result of a run that stays. Anything else (dispatch/<p>/merge, a
// branch the operator moved) stays.
func DecideBranches(project, repo string, runs []BranchRun, gone []int, refs map[string]string) []Branch {
	goneTasks := map[string][]string{}
	var goneFinals []string
	keptTasks, keptFinals := map[string]bool{}, map[string]bool{}
	for _, r := range runs {
		if !slices.Contains(gone, r.N) {
			for id := range r.Tasks {
				keptTasks[id] = true
			}
			keptFinals[r.Final] = true
			continue
		}
		if r.Repo != repo {
			continue
		}
		for id, commits := range r.Tasks {
			goneTasks[id] = append(goneTasks[id], commits...)
		}
		if r.Final != "" {
			goneFinals = append(goneFinals, r.Final)
		}
	}
	var out []Branch
	for id, commits := range goneTasks {
		ref := TaskRef(project, id)
		if at, ok := refs[ref]; ok && !keptTasks[id] && slices.Contains(commits, at) {
			out = append(out, Branch{Repo: repo, Ref: ref, Commit: at})
		}
	}
	if at, ok := refs[FinalRef(project)]; ok && slices.Contains(goneFinals, at) && !keptFinals[at] {
		out = append(out, Branch{Repo: repo, Ref: FinalRef(project), Commit: at})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// DecideSpares returns, in order, the bases whose spare checkouts on the
// nodes go with the runs gone: those a run that goes started from and no
// run that stays (the current one included) did. A spare is a ready
// checkout for the next launch from its base; a kept run's base may be
// launched from again (a retry), so its spares stay.
func DecideSpares(runs []BranchRun, gone []int) []string {
	kept := map[string]bool{}
	for _, r := range runs {
		if !slices.Contains(gone, r.N) {
			for _, b := range r.Bases {
				kept[b] = true
			}
		}
	}
	var out []string
	for _, r := range runs {
		if slices.Contains(gone, r.N) {
			for _, b := range r.Bases {
				if !kept[b] && !slices.Contains(out, b) {
					out = append(out, b)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
