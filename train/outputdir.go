package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The --output folder of a run: checks made once per job, by the main
// process, before the first step.
//
//   - A folder holding another run (its model files or checkpoints) is
//     refused unless the run resumes (--resume) or replaces it
//     (--overwrite-output, which removes the old checkpoints and model
//     files first, so that --resume latest can never pick them up).
//   - A lock file, LockFileName, stops a second job on the same folder. A
//     lock left by a dead process of this machine, or by an earlier attempt
//     of the same launcher job, is taken over.
//   - Creating the lock proves the folder writable before any training.

// LockFileName is the lock file a running job keeps in its --output.
const LockFileName = ".onnxtrain.lock"

// ErrOutputInUse is wrapped by the error for an --output another job holds.
var ErrOutputInUse = errors.New("--output is in use by another job")

// ErrOutputHoldsRun is wrapped by the error for an --output that holds
// another run.
var ErrOutputHoldsRun = errors.New("--output holds another run")

// runOutputFiles are the files a finished run leaves in --output.
var runOutputFiles = []string{"model.onnx", "model.safetensors"}

// lockInfo is the content of the lock file.
type lockInfo struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Job     string `json:"job,omitempty"`
	Started string `json:"started"`
}

// jobID names the launcher job this process belongs to, so that a
// restarted job takes over its own lock wherever rank 0 now runs; empty
// when no launcher says. ONNXTRAIN_LAUNCH_ID is what onnxtrain launch
// gives the workers of one invocation, used when nothing else names the job.
func jobID() string {
	for _, k := range []string{"ONNXTRAIN_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "ONNXTRAIN_LAUNCH_ID"} {
		if v := os.Getenv(k); v != "" && v != "none" {
			return k + "=" + v
		}
	}
	return ""
}

// priorRun lists what in dir belongs to another run: model files and
// checkpoint folders (complete or not).
func priorRun(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--output %s: %w", dir, err)
	}
	var found []string
	for _, e := range entries {
		name := e.Name()
		stem, _, _ := strings.Cut(name, ".")
		if _, ok := ckptParseName(stem); ok && e.IsDir() {
			found = append(found, name)
			continue
		}
		for _, f := range runOutputFiles {
			if name == f {
				found = append(found, name)
			}
		}
	}
	return found, nil
}

// prepareOutput makes --output ready for this job on the main process: it
// refuses another run's folder (unless --resume or --overwrite-output),
// takes the lock and so checks that the folder is writable. release
// removes the lock; it is never nil.
func prepareOutput(cfg Config, main bool, msg io.Writer) (release func(), err error) {
	release = func() {}
	if cfg.Output == "" || !main {
		return release, nil
	}
	dir := cfg.Output
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return release, fmt.Errorf("--output %s is a file; it must be a folder", dir)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return release, fmt.Errorf("--output %s cannot be created: %w", dir, err)
	}
	release, err = acquireLock(dir, msg)
	if err != nil {
		return func() {}, err
	}
	prior, err := priorRun(dir)
	if err != nil {
		release()
		return func() {}, err
	}
	switch {
	case len(prior) == 0 || (cfg.Resume != "" && !cfg.resumeOnRestart):
	case cfg.resumeOnRestart && ownRun(dir): // restart.go
	case cfg.OverwriteOutput:
		for _, name := range prior {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				if err := ckptCheckReplaceable(p); err != nil {
					release()
					return func() {}, fmt.Errorf("--overwrite-output: %s is not a checkpoint onnxtrain wrote; remove it yourself: %w", p, err)
				}
			}
			if err := os.RemoveAll(p); err != nil {
				release()
				return func() {}, fmt.Errorf("--overwrite-output: %w", err)
			}
		}
		fmt.Fprintf(msg, "--overwrite-output: removed the previous run's %s from %s\n", strings.Join(prior, ", "), dir)
	default:
		release()
		if cfg.resumeOnRestart {
			return func() {}, fmt.Errorf("%w: %s holds %s, and its %s does not name this job (%q), so this restart does not resume it; continue that run with --resume latest, replace it with --overwrite-output, or choose another --output",
				ErrOutputHoldsRun, dir, listShort(prior), RunOwnerFileName, jobID())
		}
		return func() {}, fmt.Errorf("%w: %s holds %s; continue that run with --resume latest, replace it with --overwrite-output, or choose another --output",
			ErrOutputHoldsRun, dir, listShort(prior))
	}
	if err := claimRun(dir); err != nil { // restart.go
		release()
		return func() {}, err
	}
	return release, nil
}

func listShort(names []string) string {
	if len(names) > 4 {
		return strings.Join(names[:4], ", ") + fmt.Sprintf(" and %d more", len(names)-4)
	}
	return strings.Join(names, ", ")
}

// acquireLock creates dir's lock file for this process, taking over a
// stale one; the error says who holds a live one.
func acquireLock(dir string, msg io.Writer) (func(), error) {
	path := filepath.Join(dir, LockFileName)
	host, _ := os.Hostname()
	me := lockInfo{PID: os.Getpid(), Host: host, Job: jobID(), Started: time.Now().UTC().Format(time.RFC3339)}
	b, _ := json.Marshal(me)
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			_, werr := f.Write(append(b, '\n'))
			cerr := f.Close()
			if werr != nil || cerr != nil {
				os.Remove(path)
				return nil, fmt.Errorf("--output %s is not writable: %w", dir, errors.Join(werr, cerr))
			}
			return func() { releaseLock(path, b) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("--output %s is not writable: %w", dir, err)
		}
		held, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--output %s: lock file: %w", dir, err)
		}
		var other lockInfo
		if err := json.Unmarshal(held, &other); err != nil {
			return nil, fmt.Errorf("%w: %s holds a lock file %s that cannot be read (%v); if no job uses that folder, remove the file",
				ErrOutputInUse, dir, path, err)
		}
		stale := ""
		switch {
		case other.Host == host && other.PID != me.PID && !processAlive(other.PID):
			stale = fmt.Sprintf("process %d of this machine has ended", other.PID)
		case other.Job != "" && other.Job == me.Job:
			stale = fmt.Sprintf("it is an earlier attempt of this job (%s)", me.Job)
		}
		if stale == "" {
			return nil, fmt.Errorf("%w: %s is locked by process %d on %s (since %s); wait for it, choose another --output, or, if that job is gone, remove %s",
				ErrOutputInUse, dir, other.PID, other.Host, other.Started, path)
		}
		fmt.Fprintf(msg, "--output %s: taking over the lock of a job that is gone (%s)\n", dir, stale)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--output %s: removing a stale lock: %w", dir, err)
		}
	}
	return nil, fmt.Errorf("%w: %s: another job took the lock at the same time", ErrOutputInUse, dir)
}

// releaseLock removes the lock file if it is still this process's.
func releaseLock(path string, mine []byte) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == string(mine) {
		os.Remove(path)
	}
}

// agreeOnOutput makes every process of a data-parallel job fail together
// when the main process refused --output (the others would otherwise wait
// for it in their first collective until the timeout): one small
// collective at startup. err is the main process's error, returned as is.
func agreeOnOutput(ctx context.Context, acc *Accelerator, cfg Config, err error) error {
	if acc.NumProcesses() == 1 || cfg.Output == "" {
		return err
	}
	failed := 0.0
	if err != nil {
		failed = 1
	}
	sum, rerr := acc.ReduceSum(ctx, failed)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	if err == nil && sum[0] > 0 {
		return fmt.Errorf("--output %s: the main process refused it (its error says why)", cfg.Output)
	}
	return err
}
