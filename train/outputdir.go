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
	"sync"
	"time"
)

// The --output folder of a run: checks made once per job, by the main
// process, before the first step.
//
//   - A folder holding another run (its model files or checkpoints) is
//     refused unless the run resumes (--resume) or replaces it
//     (--overwrite-output, which removes the old checkpoints and model
//     files first, so that --resume latest can never pick them up).
//   - A lock file, LockFileName, stops a second job on the same folder. It
//     names the holder's host, process id and process start time, and the
//     holder refreshes its modification time every LockRefreshEvery. A
//     lock is taken over when it is left by a dead process of this machine
//     (or one whose id now belongs to a process started later), by an
//     earlier attempt of the same launcher job, or, from another host
//     (whose processes this one cannot see), when it has not been
//     refreshed for LockStaleAfter, or at once with --force-unlock or
//     --overwrite-output.
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

// LockStaleAfter is how long a lock of another host may go without a
// refresh before a job takes it over: its holder refreshes it every
// LockRefreshEvery while it runs, so a lock this old was left by a job that
// is gone (or by a host whose clock is that far from this one's).
const LockStaleAfter = 10 * time.Minute

// LockRefreshEvery is how often a running job refreshes its lock file's
// modification time.
const LockRefreshEvery = LockStaleAfter / 10

// lockRefreshEvery is LockRefreshEvery, shorter in tests.
var lockRefreshEvery = LockRefreshEvery

// lockInfo is the content of the lock file.
type lockInfo struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Job     string `json:"job,omitempty"`
	Started string `json:"started"`
	// ProcStart identifies the process beside its id where the system
	// tells (Linux: its start time in clock ticks after boot), so that an
	// id reused by a later process does not keep the lock alive.
	ProcStart uint64 `json:"proc_start,omitempty"`
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
// refuses another run's folder (unless --resume or --overwrite-output, or
// onRestart, when a launcher's restart set --resume and the folder is the
// job's own), takes the lock and so checks that the folder is writable.
// release removes the lock; it is never nil.
func prepareOutput(cfg Config, onRestart, main bool, msg io.Writer) (release func(), err error) {
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
	release, err = acquireLock(dir, cfg.ForceUnlock || cfg.OverwriteOutput, msg)
	if err != nil {
		return func() {}, err
	}
	prior, err := priorRun(dir)
	if err != nil {
		release()
		return func() {}, err
	}
	switch {
	case len(prior) == 0 || (cfg.Resume != "" && !onRestart):
	case onRestart && ownRun(dir): // restart.go
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
		if onRestart {
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
// stale one (or, with force, any held from another host); the error says
// who holds a live one. release removes the lock and stops its refreshes.
func acquireLock(dir string, force bool, msg io.Writer) (func(), error) {
	path := filepath.Join(dir, LockFileName)
	host, _ := os.Hostname()
	me := lockInfo{PID: os.Getpid(), Host: host, Job: jobID(), Started: time.Now().UTC().Format(time.RFC3339)}
	me.ProcStart, _ = processStart(me.PID)
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
			stop := refreshLock(path, b)
			return func() { stop(); releaseLock(path, b) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("--output %s is not writable: %w", dir, err)
		}
		held, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--output %s: lock file: %w", dir, err)
		}
		var age time.Duration
		if st, err := os.Stat(path); err == nil {
			age = time.Since(st.ModTime())
		}
		var other lockInfo
		if err := json.Unmarshal(held, &other); err != nil {
			if !force {
				return nil, fmt.Errorf("%w: %s holds a lock file %s that cannot be read (%v); if no job uses that folder, remove the file or give --force-unlock",
					ErrOutputInUse, dir, path, err)
			}
			other = lockInfo{Host: "an unknown host"}
		}
		stale, refusal := lockStale(other, me, age, force, path)
		if stale == "" {
			return nil, fmt.Errorf("%w: %s is locked by process %d on %s (since %s, refreshed %s ago); %s",
				ErrOutputInUse, dir, other.PID, other.Host, other.Started, age.Round(time.Second), refusal)
		}
		fmt.Fprintf(msg, "--output %s: taking over the lock of process %d on %s (%s)\n", dir, other.PID, other.Host, stale)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--output %s: removing a stale lock: %w", dir, err)
		}
	}
	return nil, fmt.Errorf("%w: %s: another job took the lock at the same time", ErrOutputInUse, dir)
}

// lockStale decides about a lock other holds, last refreshed age ago: it
// returns why the lock may be taken over, or "" and what the user can do.
func lockStale(other, me lockInfo, age time.Duration, force bool, path string) (stale, refusal string) {
	remove := "wait for it, choose another --output, or, if that job is gone, remove " + path
	switch {
	case other.Job != "" && other.Job == me.Job:
		return fmt.Sprintf("it is an earlier attempt of this job (%s)", me.Job), ""
	case other.Host == me.Host && other.PID == me.PID:
		return "", remove // this very process: a second run in one process
	case other.Host == me.Host && !processAlive(other.PID):
		return fmt.Sprintf("process %d of this machine has ended; a job that is gone", other.PID), ""
	case other.Host == me.Host && other.ProcStart != 0:
		if now, ok := processStart(other.PID); ok && now != other.ProcStart {
			return fmt.Sprintf("process id %d now belongs to a process started later; the job that held it is gone", other.PID), ""
		}
		return "", remove
	case other.Host == me.Host:
		return "", remove
	case force:
		return "--force-unlock or --overwrite-output: taken from another host without knowing whether its job is gone", ""
	case age > LockStaleAfter:
		return fmt.Sprintf("another host's lock, not refreshed for %s (more than %s): its job is gone", age.Round(time.Second), LockStaleAfter), ""
	}
	return "", fmt.Sprintf("this machine cannot see %s's processes: the lock is taken over once its job has not refreshed it for %s, or at once with --force-unlock (when you know that job is gone; or remove %s)", other.Host, LockStaleAfter, path)
}

// refreshLock touches the lock file every LockRefreshEvery while it is
// still this process's; the returned function stops it.
func refreshLock(path string, mine []byte) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(lockRefreshEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == string(mine) {
					now := time.Now()
					_ = os.Chtimes(path, now, now) // a failed refresh shows as an older lock, nothing worse
				}
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
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
