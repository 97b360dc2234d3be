package slurmjob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// HomeTag is the short, plain form of a home's id (nodes.HomeID:
// host:path) that JobName takes.
func HomeTag(homeID string) string {
	sum := sha256.Sum256([]byte(homeID))
	return hex.EncodeToString(sum[:6])
}

// ProbeFile is the name, in work_dir, of the file the probe job of
// `nodes check` writes (nonce: the check's own random word).
func ProbeFile(nonce string) string { return ".dispatch-slurm-probe-" + nonce }

// ProbeArgs is the sbatch command line of `nodes check`'s probe job: the
// node's partition, account, QoS and extra, a minute at most, in work_dir.
// Its script (ProbeScript) goes on stdin.
func ProbeArgs(c Cluster, home, workDir, nonce string) ([]string, error) {
	if !namePart().MatchString(home) || !namePart().MatchString(nonce) || !strings.HasPrefix(workDir, "/") {
		return nil, fmt.Errorf("probe: home %q, nonce %q or work_dir %q is not usable", home, nonce, workDir)
	}
	args := []string{"sbatch", "--parsable", "--no-requeue", "--job-name=" + JobName(home),
		"--comment=probe/" + nonce, "--chdir=" + workDir, "--output=/dev/null", "--time=" + FormatTime(TimeMargin)}
	for _, o := range []struct{ opt, val string }{
		{"--partition", c.Partition}, {"--account", c.Account}, {"--qos", c.QOS},
	} {
		if o.val != "" {
			args = append(args, o.opt+"="+o.val)
		}
	}
	return append(args, c.Extra...), nil
}

// ProbeScript writes the probe's file, whole (through a temporary name),
// with the nonce, the job's id and the compute node's name.
func ProbeScript(workDir, nonce string) string {
	file := quote(workDir + "/" + ProbeFile(nonce))
	tmp := quote(workDir + "/" + ProbeFile(nonce) + ".tmp")
	return "#!/bin/sh\n" +
		"printf '%s %s %s\\n' " + quote(nonce) + " \"$SLURM_JOB_ID\" \"$(hostname)\" > " + tmp + " && mv " + tmp + " " + file + "\n"
}

// Probe is what one look at the probe job saw.
type Probe struct {
	Nonce string
	// File is the probe file's content as the login host reads it; ""
	// when it is not there.
	File string
	// QueryOK is whether squeue answered; Job is the probe's job in the
	// answer, nil when it is not listed.
	QueryOK bool
	Job     *QueueJob
	// EndedBefore: an earlier look already saw the job ended or gone
	// without the file (one more look allows for a shared filesystem's
	// attribute cache).
	EndedBefore bool
}

// ProbeResult is the decision over one look.
type ProbeResult struct {
	Done, OK bool
	// Msg says what the probe proved, or why it failed or still waits.
	Msg string
	// Ended: the job ended (or left the queue) without the file, a first
	// time: look once more (Probe.EndedBefore).
	Ended bool
}

// DecideProbe says whether the probe proved work_dir shared: the file
// with the nonce, read on the login host, proves it; a job that ended
// twice-seen without it proves the opposite.
func DecideProbe(p Probe) ProbeResult {
	if f := strings.Fields(p.File); len(f) == 3 && f[0] == p.Nonce {
		return ProbeResult{Done: true, OK: true, Msg: fmt.Sprintf("work_dir is shared: probe job %s wrote it on %s", f[1], f[2])}
	}
	switch {
	case !p.QueryOK:
		return ProbeResult{Msg: "squeue failed"}
	case p.Job != nil && waiting[p.Job.State]:
		return ProbeResult{Msg: pendingReason(p.Job)}
	case p.Job != nil && active[p.Job.State]:
		return ProbeResult{Msg: "Slurm job " + p.Job.ID + " " + p.Job.State}
	case !p.EndedBefore:
		return ProbeResult{Ended: true, Msg: "the probe job ended; looking once more"}
	case p.Job != nil && p.Job.State != "COMPLETED":
		return ProbeResult{Done: true, Msg: ended(p.Job) + " without writing its file in work_dir: check the partition, account and extra under slurm:"}
	}
	return ProbeResult{Done: true, Msg: "the probe job ran, but its file is not in work_dir on the login host: " +
		"work_dir must be on a filesystem the login host and the compute nodes share (set work_dir: to a path on it)"}
}
