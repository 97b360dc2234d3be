package nodes

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// Slurm is a node's slurm: block (issue 36): the node is a Slurm cluster,
// reached at its login host (the node's ssh:, or this machine), and each
// attempt is one batch job. The node's slots are its jobs in flight.
type Slurm struct {
	Partition string // --partition; "" leaves it to the cluster's default
	Account   string // --account; "" leaves it to the user's default
	// QOS maps a task's priority to a quality of service (--qos): each
	// key is the first priority (1 to 9) its QoS applies to, up to the
	// next key. Nil, or a priority before the first key, gives no --qos.
	QOS map[int]string
	// Time is the longest a job may run (--time); a task's timeout
	// shortens it. 0 leaves it to the partition.
	Time time.Duration
	// MaxPending is the most jobs of this node waiting in the queue at
	// once; it is Slots unless nodes.yaml says.
	MaxPending int
	// Extra are further sbatch options, each whole (--gres=gpu:1); none
	// that dispatch sets itself (slurmjob.Owned).
	Extra []string
}

// QOSFor is the QoS a task of the given priority runs under, "" for the
// cluster's default.
func (s *Slurm) QOSFor(priority int) string {
	best, qos := 0, ""
	for from, q := range s.QOS {
		if from <= priority && from > best {
			best, qos = from, q
		}
	}
	return qos
}

// slurmName is what partition, account and QoS names may hold: Slurm's
// own names, a comma between several partitions.
var slurmName = regexp.MustCompile(`^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$`)

// slurm reads a node's slurm: {partition, account, qos, time,
// max_pending, extra}; slots bounds max_pending.
func (p *parser) slurm(v *yaml.Node, where string, slots int) *Slurm {
	where += " slurm"
	f, ok := p.fields(v, where, where, Keys["slurm"]...)
	if !ok {
		return nil
	}
	s := &Slurm{MaxPending: slots}
	for _, k := range []struct {
		key string
		dst *string
	}{{"partition", &s.Partition}, {"account", &s.Account}} {
		if v := f[k.key].val; v != nil && !yamlval.IsNull(v) {
			*k.dst, _ = p.slurmName(v, where, k.key)
		}
	}
	if v := f["qos"].val; v != nil && !yamlval.IsNull(v) {
		s.QOS = p.slurmQOS(v, where)
	}
	if v := f["time"].val; v != nil && !yamlval.IsNull(v) {
		if d, ok := p.Duration(v, where, "time"); ok {
			if d < time.Minute {
				p.Errorf(v, "write a time of at least 1m (Slurm counts job time in minutes)", "%s: time %s is shorter than a minute", where, d)
			} else {
				s.Time = d
			}
		}
	}
	if v := f["max_pending"].val; v != nil && !yamlval.IsNull(v) {
		if n, ok := p.Int(v, where, "max_pending", 1, slots); ok {
			s.MaxPending = n
		}
	}
	if v := f["extra"].val; v != nil && !yamlval.IsNull(v) {
		s.Extra = p.slurmExtra(v, where)
	}
	return s
}

// slurmName reads a partition, account or QoS name.
func (p *parser) slurmName(v *yaml.Node, where, key string) (string, bool) {
	s, ok := p.Scalar(v, where, key)
	if !ok {
		return "", false
	}
	if !slurmName.MatchString(s) {
		p.Errorf(v, fmt.Sprintf("write the name as Slurm knows it (sinfo, sacctmgr show %s), e.g. %s: gpu", key, key),
			"%s: %s %q is not a Slurm name (letters, digits, '.', '_', '-')", where, key, s)
		return "", false
	}
	return s, true
}

// slurmQOS reads qos: one name for every priority, or a mapping from the
// first priority each QoS applies to ({1: urgent, 5: normal, 8: low}).
func (p *parser) slurmQOS(v *yaml.Node, where string) map[int]string {
	v = yamlval.Resolve(v)
	if v.Kind == yaml.ScalarNode {
		if s, ok := p.slurmName(v, where, "qos"); ok {
			return map[int]string{1: s}
		}
		return nil
	}
	pairs, ok := p.mapping(v, where+" qos")
	if !ok {
		return nil
	}
	out := map[int]string{}
	for _, kv := range pairs {
		from, err := strconv.Atoi(kv.key.Value)
		if err != nil || from < 1 || from > 9 {
			p.Errorf(kv.key, "key each QoS by the first priority it applies to, 1 (first) to 9 (last), e.g. qos: {1: urgent, 5: normal}",
				"%s: qos key %q is not a priority from 1 to 9", where, kv.key.Value)
			continue
		}
		if s, ok := p.slurmName(kv.val, where, "qos"); ok {
			out[from] = s
		}
	}
	return out
}

// slurmExtra reads extra: a list of whole sbatch options, none of those
// dispatch sets.
func (p *parser) slurmExtra(v *yaml.Node, where string) []string {
	v = yamlval.Resolve(v)
	if v.Kind != yaml.SequenceNode {
		p.Errorf(v, "write extra as a list of sbatch options, e.g. extra: [--gres=gpu:1]",
			"%s: extra must be a list, not %s", where, yamlval.Describe(v))
		return nil
	}
	var out []string
	for _, item := range v.Content {
		s, ok := p.Scalar(item, where, "extra")
		if !ok {
			continue
		}
		if err := slurmjob.CheckExtra(strings.TrimSpace(s)); err != nil {
			p.Errorf(item, "remove it from extra, or write it as dispatch's own key says",
				"%s: extra: %v", where, err)
			continue
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out
}
