package store

import (
	"reflect"
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

// Every field of a patch names its column, and every set field is written.
func TestPatchColumnsCoverEveryField(t *testing.T) {
	for _, p := range []any{TaskPatch{}, AttemptPatch{}, ProjectPatch{}} {
		v := reflect.New(reflect.TypeOf(p)).Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			f.Set(reflect.New(f.Type().Elem()))
		}
		if got, want := len(patchColumns(v.Interface()).clauses), v.NumField(); got != want {
			t.Errorf("%T: %d columns for %d set fields", p, got, want)
		}
	}
}

// Every field of a TaskPatch has its field in Task, of its type: ApplyTo
// leaves none out.
func TestTaskPatchAppliesEveryField(t *testing.T) {
	pt, tt := reflect.TypeOf(TaskPatch{}), reflect.TypeOf(domain.Task{})
	for i := range pt.NumField() {
		f := pt.Field(i)
		if g, ok := tt.FieldByName(f.Name); !ok || g.Type != f.Type.Elem() {
			t.Errorf("TaskPatch.%s has no field of type %s in Task", f.Name, f.Type.Elem())
		}
	}
	var task domain.Task
	nb := task.CreatedAt.AddDate(1, 0, 0)
	TaskPatch{ErrorClass: new("lost"), NotBefore: &nb, DependsOn: &[]string{"A"}}.ApplyTo(&task)
	if task.ErrorClass != "lost" || !task.NotBefore.Equal(nb) || len(task.DependsOn) != 1 {
		t.Errorf("ApplyTo left %+v", task)
	}
}
