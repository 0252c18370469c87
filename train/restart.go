package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Restarts by a launcher (onnxtrain launch --max-restarts, torchrun).
//
// A restarted worker continues its job: with --output and no --resume it
// resumes the newest checkpoint under --output (as --resume latest), so
// that the first attempt's checkpoints are not "another run". The main
// process proves that the folder is this job's own: the job that takes an
// --output writes RunOwnerFileName there, naming its job id (jobID); a
// restart accepts the checkpoints and model files only under its own job's
// file, and otherwise refuses them as any new run does (an attempt that
// was refused for another run's folder does not make its restart accept
// that run).

// RunOwnerFileName is the file in --output that names the job that
// writes there.
const RunOwnerFileName = ".onnxtrain.job"

// runOwner is the content of RunOwnerFileName.
type runOwner struct {
	Job     string `json:"job"`
	Host    string `json:"host"`
	Started string `json:"started"`
}

// launchRestart is how many times the launcher restarted this process's
// workers (ONNXTRAIN_RESTART_COUNT, or torchrun's TORCHELASTIC_RESTART_COUNT);
// 0 for a first start or without a launcher.
func launchRestart() int {
	for _, k := range []string{"ONNXTRAIN_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// autoResume makes a restarted worker with --output and no --resume resume
// the newest checkpoint there. Every process of the job decides alike
// (from its environment), so they all load the same checkpoint; the main
// process's prepareOutput then checks that the folder is this job's own.
// It reports whether it set Resume.
func autoResume(cfg *Config, msg io.Writer) bool {
	if cfg.Resume != "" || cfg.Output == "" || launchRestart() == 0 {
		return false
	}
	cfg.Resume = "latest"
	if cfg.LogFormat != "json" {
		fmt.Fprintf(msg, "restart %d of this job: resuming its newest checkpoint under %s (as --resume latest)\n", launchRestart(), cfg.Output)
	}
	return true
}

// ownRun reports whether dir's RunOwnerFileName names this process's job.
func ownRun(dir string) bool {
	job := jobID()
	if job == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, RunOwnerFileName))
	if err != nil {
		return false
	}
	var o runOwner
	return json.Unmarshal(b, &o) == nil && o.Job == job
}

// claimRun writes dir's RunOwnerFileName for this process's job, when a
// launcher or scheduler names the job (there is nothing to prove otherwise).
func claimRun(dir string) error {
	job := jobID()
	if job == "" {
		err := os.Remove(filepath.Join(dir, RunOwnerFileName))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--output %s: %w", dir, err)
		}
		return nil
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(runOwner{Job: job, Host: host, Started: time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(filepath.Join(dir, RunOwnerFileName), append(b, '\n'), 0o666); err != nil {
		return fmt.Errorf("--output %s is not writable: %w", dir, err)
	}
	return nil
}
