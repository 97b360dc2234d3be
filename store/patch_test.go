package store

import (
	"reflect"
	"testing"
)

// Every field of a patch names its column, and every set field is written.
func TestPatchColumnsCoverEveryField(t *testing.T) {
	for _, p := range []any{TaskPatch{}, RunPatch{}, ProjectPatch{}} {
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
