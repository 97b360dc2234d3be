package yamlval

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// readCase reads the value of key "k" in src with one reader. want is the
// value read, or zero with problem, the whole message the operator sees.
type readCase struct {
	name    string
	src     string
	read    func(d Doc, v *yaml.Node) (any, bool)
	want    any
	problem string
}

func runReads(t *testing.T, tests []readCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
				t.Fatal(err)
			}
			var v *yaml.Node
			m := doc.Content[0]
			for i := 0; i+1 < len(m.Content); i += 2 {
				if m.Content[i].Value == "k" {
					v = m.Content[i+1]
				}
			}
			var ps Problems
			got, ok := tc.read(Doc{Problems: &ps, File: "f.yaml", Offset: 1}, v)
			if tc.problem == "" {
				if !ok || got != tc.want || len(ps) != 0 {
					t.Errorf("read = %v, %v (problems %v); want %v", got, ok, ps, tc.want)
				}
				return
			}
			if ok || len(ps) != 1 || ps[0].Error() != tc.problem {
				t.Errorf("read = %v, %v; problems:\n%v\nwant:\n%s", got, ok, ps, tc.problem)
			}
		})
	}
}

func str(d Doc, v *yaml.Node) (any, bool)      { return d.String(v, "", "k") }
func scalar(d Doc, v *yaml.Node) (any, bool)   { return d.Scalar(v, `node "a"`, "k") }
func boolean(d Doc, v *yaml.Node) (any, bool)  { return d.Bool(v, "", "k") }
func number(d Doc, v *yaml.Node) (any, bool)   { return d.Number(v, "", "k") }
func duration(d Doc, v *yaml.Node) (any, bool) { return d.Duration(v, "controller", "k") }
func size(d Doc, v *yaml.Node) (any, bool)     { return d.Size(v, "", "k") }
func digit(d Doc, v *yaml.Node) (any, bool)    { return d.Int(v, "", "k", 1, 9) }
func atLeast1(d Doc, v *yaml.Node) (any, bool) { return d.Int(v, `node "a"`, "k", 1, MaxInt) }
func tokens(d Doc, v *yaml.Node) (any, bool)   { return d.Int(v, "", "budget.tokens", 1, MaxInt) }

func TestString(t *testing.T) {
	const quote = "\n  fix: put the value in quotes if it is meant as text"
	runReads(t, []readCase{
		{"plain", "k: some text\n", str, "some text", ""},
		{"quoted number", "k: '5'\n", str, "5", ""},
		{"alias", "a: &x text\nk: *x\n", str, "text", ""},
		{"number", "j: 1\nk: 5\n", str, "", "f.yaml:3: k must be a string, not 5" + quote},
		{"bool", "k: true\n", str, "", "f.yaml:2: k must be a string, not true" + quote},
		{"list", "k: [a]\n", str, "", "f.yaml:2: k must be a string, not a list" + quote},
		{"null", "k:\n", str, "", "f.yaml:2: k must be a string, not empty" + quote},
		{"alias to a number: the anchor's line", "a: &x 5\nk: *x\n", str, "", "f.yaml:2: k must be a string, not 5" + quote},
	})
}

func TestScalar(t *testing.T) {
	const fix = "\n  fix: write k as a single value"
	runReads(t, []readCase{
		{"plain", "k: text\n", scalar, "text", ""},
		{"number as written", "k: 050\n", scalar, "050", ""},
		{"bool as written", "k: yes\n", scalar, "yes", ""},
		{"alias", "a: &x 7\nk: *x\n", scalar, "7", ""},
		{"mapping", "k: {a: 1}\n", scalar, "", `f.yaml:2: node "a": k must be a string, not a mapping` + fix},
		{"null", "k: ~\n", scalar, "", `f.yaml:2: node "a": k must be a string, not empty` + fix},
	})
}

func TestInt(t *testing.T) {
	runReads(t, []readCase{
		{"in range", "k: 3\n", digit, 3, ""},
		{"bounds", "k: 9\n", digit, 9, ""},
		{"alias", "a: &x 1\nk: *x\n", digit, 1, ""},
		{"below", "k: 0\n", digit, 0, "f.yaml:2: k must be a whole number from 1 to 9, not 0\n  fix: write a whole number from 1 to 9"},
		{"above", "k: 10\n", digit, 0, "f.yaml:2: k must be a whole number from 1 to 9, not 10\n  fix: write a whole number from 1 to 9"},
		{"word", "k: high\n", digit, 0, `f.yaml:2: k must be a whole number from 1 to 9, not "high"` +
			"\n  fix: write a whole number from 1 to 9, without quotes, e.g. k: 2"},
		{"null", "k:\n", digit, 0, "f.yaml:2: k must be a whole number from 1 to 9, not empty" +
			"\n  fix: write a whole number from 1 to 9, without quotes, e.g. k: 2"},
		{"no upper bound", "k: 100000\n", atLeast1, 100000, ""},
		{"under the least", "k: 0\n", atLeast1, 0, "f.yaml:2: node \"a\": k must be at least 1, not 0\n  fix: set k to 1 or more"},
		{"fraction", "k: 2.5\n", atLeast1, 0, "f.yaml:2: node \"a\": k must be a whole number, at least 1, not 2.5" +
			"\n  fix: write a whole number, at least 1, without quotes, e.g. k: 2"},
		{"quoted", "k: '2'\n", atLeast1, 0, "f.yaml:2: node \"a\": k must be a whole number, at least 1, not \"2\"" +
			"\n  fix: write a whole number, at least 1, without quotes, e.g. k: 2"},
		{"a path: the example names its last part", "k: x\n", tokens, 0, `f.yaml:2: budget.tokens must be a whole number, at least 1, not "x"` +
			"\n  fix: write a whole number, at least 1, without quotes, e.g. tokens: 2"},
		{"too large for an int", "k: 99999999999999999999\n", atLeast1, 0, "f.yaml:2: node \"a\": k must be a whole number, at least 1, not 99999999999999999999" +
			"\n  fix: write a whole number, at least 1, without quotes, e.g. k: 2"},
	})
}

func TestNumber(t *testing.T) {
	const fix = "\n  fix: write a positive number without quotes, e.g. 20 or 12.5"
	runReads(t, []readCase{
		{"whole", "k: 20\n", number, 20.0, ""},
		{"decimals", "k: 12.5\n", number, 12.5, ""},
		{"alias", "a: &x 3\nk: *x\n", number, 3.0, ""},
		{"zero", "k: 0\n", number, 0.0, "f.yaml:2: k must be positive, not 0" + fix},
		{"infinite", "k: .inf\n", number, 0.0, "f.yaml:2: k must be positive, not .inf" + fix},
		{"quoted", "k: '20'\n", number, 0.0, `f.yaml:2: k must be a number, not "20"` + fix},
		{"null", "k: null\n", number, 0.0, "f.yaml:2: k must be a number, not empty" + fix},
	})
}

// TestBool: nodes.yaml took YAML 1.1's yes/no, quoted or not, and the
// specs refused them; both take them now, unquoted only.
func TestBool(t *testing.T) {
	const fix = "\n  fix: write k: true or k: false"
	runReads(t, []readCase{
		{"true", "k: true\n", boolean, true, ""},
		{"false", "k: false\n", boolean, false, ""},
		{"yes", "k: yes\n", boolean, true, ""},
		{"off", "k: off\n", boolean, false, ""},
		{"alias", "a: &x true\nk: *x\n", boolean, true, ""},
		{"word", "k: sometimes\n", boolean, false, `f.yaml:2: k must be true or false, not "sometimes"` + fix},
		{"quoted yes", "k: \"yes\"\n", boolean, false, `f.yaml:2: k must be true or false, not "yes"` + fix},
		{"block text", "k: |-\n  yes\n", boolean, false, `f.yaml:2: k must be true or false, not "yes"` + fix},
		{"quoted true", "k: 'true'\n", boolean, false, `f.yaml:2: k must be true or false, not "true"` + fix},
		{"number", "k: 1\n", boolean, false, "f.yaml:2: k must be true or false, not 1" + fix},
		{"null", "k:\n", boolean, false, "f.yaml:2: k must be true or false, not empty" + fix},
	})
}

// TestDuration: surrounding space is trimmed in every file, and a bare
// number is asked for a unit in every file (the specs used to give the
// general fix).
func TestDuration(t *testing.T) {
	const fix = "\n  fix: write a positive duration with a unit, e.g. 45s, 30m or 1h30m"
	runReads(t, []readCase{
		{"seconds", "k: 30s\n", duration, 30 * time.Second, ""},
		{"spaces", "k: ' 1h30m '\n", duration, 90 * time.Minute, ""},
		{"alias", "a: &x 2m\nk: *x\n", duration, 2 * time.Minute, ""},
		{"words", "k: 30 minutes\n", duration, time.Duration(0), `f.yaml:2: controller: k: "30 minutes" is not a duration` + fix},
		{"zero", "k: 0s\n", duration, time.Duration(0), "f.yaml:2: controller: k must be positive, not 0s" + fix},
		{"negative", "k: -5m\n", duration, time.Duration(0), "f.yaml:2: controller: k must be positive, not -5m" + fix},
		{"no unit", "k: 30\n", duration, time.Duration(0), "f.yaml:2: controller: k must be a duration, not 30\n  fix: add a unit, e.g. k: 30s"},
		{"list", "k: [1s]\n", duration, time.Duration(0), "f.yaml:2: controller: k must be a duration, not a list" + fix},
		{"null", "k:\n", duration, time.Duration(0), "f.yaml:2: controller: k must be a duration, not empty" + fix},
	})
}

func TestSizeReader(t *testing.T) {
	const fix = "\n  fix: write bytes or a size with a unit, e.g. 512MiB, 2GiB or 1.5GB (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024)"
	runReads(t, []readCase{
		{"bytes", "k: 1024\n", size, int64(1024), ""},
		{"unit", "k: 2GiB\n", size, int64(2 << 30), ""},
		{"alias", "a: &x 1KB\nk: *x\n", size, int64(1000), ""},
		{"unknown unit", "k: 2XB\n", size, int64(0), `f.yaml:2: k: "2XB" has an unknown unit "XB"` + fix},
		{"negative", "k: -1GiB\n", size, int64(0), `f.yaml:2: k: "-1GiB" is not a size` + fix},
		{"list", "k: [1]\n", size, int64(0), "f.yaml:2: k must be a size, not a list" + fix},
		{"null", "k:\n", size, int64(0), "f.yaml:2: k must be a size, not empty" + fix},
	})
}
