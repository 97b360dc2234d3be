package wrapper

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// `launch` starts a batch of attempts on one node in one call: the
// controller sends each attempt's task directory, spec, launch.json and
// environment (the api_mode's secrets) as one document on stdin, and the
// wrapper writes spec.md and launch.json, then starts each supervisor as
// `run` does, handing it the environment over a pipe. Secrets are never
// written anywhere. It prints one result per attempt, in order.

// LaunchBatch is the document `launch` reads on stdin.
type LaunchBatch struct {
	Launches []LaunchItem `json:"launches"`
}

// LaunchItem is one attempt to start.
type LaunchItem struct {
	// Dir is the absolute task directory; it is created when missing.
	Dir string `json:"dir"`
	// Spec is written to spec.md (read-only).
	Spec string `json:"spec"`
	// Launch is written to launch.json.
	Launch Launch `json:"launch"`
	// Env is the api_mode's environment, for the tool only.
	Env map[string]string `json:"env,omitempty"`
}

// LaunchReply is what `launch` prints.
type LaunchReply struct {
	Results []LaunchResult `json:"results"`
}

// LaunchResult is one attempt's outcome: Run when its supervisor started,
// else Error and Kind (already_running when a live supervisor holds the
// directory: the attempt may have been started by an earlier call).
type LaunchResult struct {
	Dir   string    `json:"dir"`
	Run   *RunReply `json:"run,omitempty"`
	Error string    `json:"error,omitempty"`
	Kind  string    `json:"kind,omitempty"`
}

const (
	// maxLaunchBatch caps the document on stdin.
	maxLaunchBatch = 64 << 20
	// launchParallel bounds the supervisors started at once.
	launchParallel = 16
)

func cmdLaunch(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("launch")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxLaunchBatch+1))
	if err != nil {
		return ioError(fmt.Errorf("read the launches from stdin: %w", err))
	}
	if len(data) > maxLaunchBatch {
		return usageErrorf("launch: the document on stdin is larger than %d bytes", maxLaunchBatch)
	}
	var batch LaunchBatch
	if err := json.Unmarshal(data, &batch); err != nil {
		return usageErrorf("launch: stdin: %v", err)
	}
	reply := LaunchReply{Results: make([]LaunchResult, len(batch.Launches))}
	var wg sync.WaitGroup
	sem := make(chan struct{}, launchParallel)
	for i, item := range batch.Launches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := LaunchResult{Dir: item.Dir}
			run, err := launchOne(ctx, item)
			if err != nil {
				r.Error, r.Kind = err.Error(), errorKind(err)
			} else {
				r.Run = run
			}
			reply.Results[i] = r
		}()
	}
	wg.Wait()
	return printJSON(stdout, reply)
}

// launchOne writes one attempt's files and starts its supervisor.
func launchOne(ctx context.Context, item LaunchItem) (*RunReply, error) {
	dir, err := taskDirFlag("launch", item.Dir)
	if err != nil {
		return nil, err
	}
	if dir != item.Dir {
		return nil, usageErrorf("launch: task directory %q is not absolute and clean", item.Dir)
	}
	l := item.Launch
	if err := l.normalize(); err != nil {
		return nil, usageErrorf("launch: %s: invalid launch: %v", dir, err)
	}
	for k, v := range item.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, usageErrorf("launch: %s: invalid variable name %q or NUL in its value", dir, k)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, ioError(fmt.Errorf("create %s: %w", dir, err))
	}
	if alive, err := supervisorAlive(dir); err != nil {
		return nil, ioError(err)
	} else if alive {
		return nil, &cmdError{KindAlreadyRunning, fmt.Errorf("a supervisor is already running in %s", dir)}
	}
	launchJSON, err := json.MarshalIndent(item.Launch, "", "  ")
	if err != nil {
		return nil, &cmdError{KindInternal, err}
	}
	// Written whole or not at all, replacing whatever the task left at
	// these names (a link is replaced, never followed).
	if err := WriteFileAtomic(filepath.Join(dir, fileSpec), []byte(item.Spec), 0o444); err != nil {
		return nil, ioError(err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, fileLaunch), launchJSON, 0o644); err != nil {
		return nil, ioError(err)
	}
	env := item.Env
	if env == nil {
		env = map[string]string{}
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return nil, &cmdError{KindInternal, fmt.Errorf("encode environment: %w", err)}
	}
	return startSupervisor(ctx, dir, envJSON)
}
