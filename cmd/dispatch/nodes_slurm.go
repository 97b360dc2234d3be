package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// slurmProbeTimeout bounds `nodes check`'s probe job: a cluster with no
// room for a one-minute job in this long cannot prove its work_dir.
var slurmProbeTimeout = 2 * time.Minute

// slurmProbe proves a Slurm node's work_dir shared by the login host and
// the compute nodes (issue 36): it submits a probe job that writes a file
// there, and reads the file on the login host. It returns what it proved,
// or an error saying what is wrong; the probe job is cancelled if it has
// not ended, and its file removed.
func slurmProbe(ctx context.Context, tr nodes.Transport, n nodes.Node, workDir, homeID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, slurmProbeTimeout)
	defer cancel()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	nonce, home := hex.EncodeToString(b[:]), slurmjob.HomeTag(homeID)
	c := slurmjob.Cluster{Partition: n.Slurm.Partition, Account: n.Slurm.Account, QOS: n.Slurm.QOSFor(9), Extra: n.Slurm.Extra}
	args, err := slurmjob.ProbeArgs(c, home, workDir, nonce)
	if err != nil {
		return "", err
	}
	res, err := tr.Exec(ctx, args, []byte(slurmjob.ProbeScript(workDir, nonce)))
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		return "", fmt.Errorf("slurm probe: sbatch: %w (check that sbatch is on the login host's PATH, and slurm:'s partition, account, qos and extra)", err)
	}
	id, err := slurmjob.ParseSubmit(res.Stdout)
	if err != nil {
		return "", fmt.Errorf("slurm probe: %w", err)
	}
	file := workDir + "/" + slurmjob.ProbeFile(nonce)
	// Cleanup outlives ctx: it must run when the probe timed out.
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer ccancel()
		_, _ = tr.Exec(cctx, []string{"scancel", id}, nil)
		_, _ = tr.Exec(cctx, []string{"rm", "-f", file}, nil)
	}()
	p := slurmjob.Probe{Nonce: nonce}
	for {
		p.File, p.QueryOK, p.Job = "", false, nil
		var buf bytes.Buffer
		if err := tr.Get(ctx, file, &buf); err == nil && buf.Len() < 1024 {
			p.File = buf.String()
		}
		if res, err := tr.Exec(ctx, slurmjob.QueueArgs(home), nil); err == nil && res.ExitCode == 0 {
			if jobs, err := slurmjob.ParseQueue(res.Stdout); err == nil {
				p.QueryOK = true
				for _, j := range jobs {
					if j.ID == id {
						p.Job = &j
					}
				}
			}
		}
		r := slurmjob.DecideProbe(p)
		switch {
		case r.Done && r.OK:
			return r.Msg, nil
		case r.Done:
			return "", fmt.Errorf("slurm probe: %s", r.Msg)
		}
		p.EndedBefore = p.EndedBefore || r.Ended
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("slurm probe: job %s did not write its file within %s (%s): nodes check cannot prove work_dir shared; run it again when the cluster has room", id, slurmProbeTimeout, r.Msg)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// slurmCheck runs the probe of a Slurm node that passed the other checks
// and records it in r: a probe that fails fails the node's check.
func slurmCheck(ctx context.Context, n nodes.Node, tr nodes.Transport, homeID string, r *checkResult) {
	start := time.Now()
	msg, err := slurmProbe(ctx, tr, n, r.WorkDir, homeID)
	r.Seconds += time.Since(start).Seconds()
	if err != nil {
		r.OK, r.Error = false, err.Error()
		return
	}
	r.Slurm = msg
}
