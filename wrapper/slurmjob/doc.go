// Package slurmjob is one attempt as a Slurm batch job (issue 36): the
// sbatch command line of an attempt (a job name that identifies the home,
// a comment naming project/task/attempt, limits as --mem, --cpus-per-task
// and --time), its batch script (the wrapper's supervisor in the task
// directory, its secrets read from a 0600 file deleted before the
// supervisor starts), the one squeue query per tick that lists every job
// of a home, and the pure decision of what a job's state means for its
// attempt. It runs nothing itself: the caller runs the commands, on the
// cluster's login host, and hands their output here.
//
// It imports only wire, so both the controller and the node side use it.
package slurmjob
