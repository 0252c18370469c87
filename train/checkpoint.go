package train

// Checkpoints: the complete training state in one folder, written so that a
// crash at any instant leaves a loadable checkpoint.
//
// A checkpoint folder holds
//
//	model.safetensors      parameters and buffers (buffer names in the
//	                       "onnxtrain.buffers" metadata entry, a JSON list)
//	optimizer.safetensors  the optimizer's state tensors, as Optimizer.State names them
//	optimizer-shard-RRRRR-of-NNNNN.safetensors
//	                       under ZeRO (zero.go): rank R's slices of the
//	                       per-parameter state, with their element ranges;
//	                       optimizer.safetensors then holds the rest and the
//	                       shard count, and LoadState reassembles whole tensors
//	state.json             step, epoch, position, schedule, RNG states, loss
//	                       scaler, checkpoint counter, extra objects, versions
//	manifest.json          format version, onnxtrain and Go versions, creation
//	                       time, and the size and SHA-256 of every other file
//
// The save protocol (SaveState), for a checkpoint at path D with parent P:
//
//  1. Every file is written into a fresh sibling folder D.tmp-XXXXXXXX and
//     fsynced, manifest.json last; then that folder is fsynced.
//  2. If D exists (a previous checkpoint), it is renamed to D.old (any stale
//     D.old is removed first: D is complete, so D.old is garbage), and P is
//     fsynced.
//  3. D.tmp-XXXXXXXX is renamed to D, and P is fsynced.
//  4. D.old is removed.
//
// Renaming a folder is atomic, so at every instant either D holds a complete
// checkpoint (the old one until step 3, the new one after), or, between steps
// 2 and 3, D is missing and D.old holds the complete old one. LoadState and
// ListCheckpoints fall back to D.old when D is missing, and the next SaveState
// replaces it. Leftover D.tmp-* folders are never read; SaveState removes
// them. One process at a time may save a given D (in data-parallel runs, rank
// 0 saves). A SIGKILL is covered by the renames; a power loss additionally
// relies on the fsyncs and on the file system honouring them.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// Files of a checkpoint folder.
const (
	CheckpointModelFile     = "model.safetensors"
	CheckpointOptimizerFile = "optimizer.safetensors"
	CheckpointStateFile     = "state.json"
	CheckpointManifestFile  = "manifest.json"
)

// CheckpointFormat and CheckpointFormatVersion identify what SaveState
// writes; LoadState refuses a newer format version.
const (
	CheckpointFormat        = "onnxtrain-checkpoint"
	CheckpointFormatVersion = 1
)

// ckptBuffersMetaKey is the model.safetensors metadata entry listing, as a JSON
// array, the tensors that are buffers rather than parameters.
const ckptBuffersMetaKey = "onnxtrain.buffers"

// Errors of checkpoint loading, for errors.Is.
var (
	// ErrCheckpointCorrupt: a file does not match its manifest entry, or
	// cannot be decoded.
	ErrCheckpointCorrupt = errors.New("checkpoint is corrupted")
	// ErrCheckpointIncomplete: the folder is not a complete checkpoint
	// (no manifest, or a file the manifest lists is missing).
	ErrCheckpointIncomplete = errors.New("checkpoint is incomplete")
	// ErrCheckpointIncompatible: the checkpoint does not fit the model.
	ErrCheckpointIncompatible = errors.New("checkpoint does not fit the model")
)

// State is everything a run needs to resume exactly.
type State struct {
	// Step is the number of optimizer steps taken.
	Step int
	// Epoch and BatchInEpoch are the data position: BatchInEpoch batches of
	// Epoch have been consumed (data.Position).
	Epoch, BatchInEpoch int
	// Params are the trainable tensors, and Buffers the non-trainable
	// state (BatchNormalization running statistics), by initializer name;
	// a name may not be in both.
	Params  map[string]*graph.Tensor
	Buffers map[string]*graph.Tensor
	// Optimizer is optim.Optimizer.State().
	Optimizer map[string]*graph.Tensor
	// OptimizerShards, when positive, says the per-parameter optimizer
	// tensors are saved in that many shard files (ZeRO, zero.go), written
	// by the ranks into the folder SaveState builds. LoadState reassembles
	// them into Optimizer and sets it.
	OptimizerShards int
	// Schedule holds the LR schedule's state (e.g. "last_lr", "step"). The
	// values go through JSON: after loading, numbers are float64, and
	// arrays and objects are []any and map[string]any.
	Schedule map[string]any
	// RNG holds opaque generator states by owner ("dropout", "data"), such
	// as (*rand.PCG).MarshalBinary or an encoded seed.
	RNG map[string][]byte
	// LossScaler holds the dynamic loss scaler of mixed precision (e.g.
	// "scale", "growth_tracker"); values must be finite.
	LossScaler map[string]float64
	// CheckpointCounter numbers the checkpoints of a run (CheckpointName).
	CheckpointCounter int
	// Extra holds the JSON form of objects registered for checkpointing,
	// by name; each must be valid JSON (it is stored compacted).
	Extra map[string]json.RawMessage
	// Versions records what produced the state (e.g. "onnxtrain", "model"
	// checksum). SaveState's manifest takes its onnxtrain version from
	// Versions["onnxtrain"] when set.
	Versions map[string]string
}

// Manifest describes a checkpoint folder: manifest.json.
type Manifest struct {
	Format           string                  `json:"format"`
	FormatVersion    int                     `json:"format_version"`
	OnnxtrainVersion string                  `json:"onnxtrain_version"`
	GoVersion        string                  `json:"go_version"`
	Created          time.Time               `json:"created"`
	Files            map[string]ManifestFile `json:"files"`
}

// ManifestFile is one file's entry in the manifest.
type ManifestFile struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ckptStateFile is the layout of state.json.
type ckptStateFile struct {
	Step              int                        `json:"step"`
	Epoch             int                        `json:"epoch"`
	BatchInEpoch      int                        `json:"batch_in_epoch"`
	CheckpointCounter int                        `json:"checkpoint_counter"`
	Schedule          map[string]any             `json:"schedule,omitempty"`
	RNG               map[string][]byte          `json:"rng,omitempty"`
	LossScaler        map[string]float64         `json:"loss_scaler,omitempty"`
	Extra             map[string]json.RawMessage `json:"extra,omitempty"`
	Versions          map[string]string          `json:"versions,omitempty"`
}

// ckptRequiredFiles are the files every checkpoint's manifest must list.
var ckptRequiredFiles = []string{CheckpointModelFile, CheckpointOptimizerFile, CheckpointStateFile}

// SaveState writes st as a checkpoint folder at dir, atomically (see the
// protocol at the top of this file): a crash leaves either the previous
// checkpoint or the new one. An existing dir is replaced only if it is a
// checkpoint (it has a valid manifest, or holds nothing but checkpoint
// files); the parent folder is created if needed.
func SaveState(dir string, st *State) error {
	return saveStateWith(dir, st, nil)
}

// saveStateWith is SaveState; extra, when not nil, is called once the data
// files are in the temporary folder tmp, to add further files there (the
// optimizer shards of ZeRO) and return their manifest entries.
func saveStateWith(dir string, st *State, extra func(tmp string) (map[string]ManifestFile, error)) error {
	if dir == "" {
		return errors.New("train: checkpoint: empty folder name")
	}
	files, err := ckptEncode(st)
	if err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	dir = filepath.Clean(dir)
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	old := dir + ".old"
	for _, p := range []string{dir, old} {
		if err := ckptCheckReplaceable(p); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(parent, 0o777); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	ckptRemoveStaleTemps(parent, base)

	tmp, err := ckptMakeTempDir(parent, base+".tmp-")
	if err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
	}()
	man := Manifest{
		Format:           CheckpointFormat,
		FormatVersion:    CheckpointFormatVersion,
		OnnxtrainVersion: ckptOnnxtrainVersion(st),
		GoVersion:        runtime.Version(),
		Created:          time.Now().UTC(),
		Files:            map[string]ManifestFile{},
	}
	for _, name := range ckptRequiredFiles {
		b := files[name]
		if err := ckptWriteSynced(filepath.Join(tmp, name), b); err != nil {
			return fmt.Errorf("train: checkpoint %s: %w", dir, err)
		}
		sum := sha256.Sum256(b)
		man.Files[name] = ManifestFile{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	if extra != nil {
		more, err := extra(tmp)
		if err != nil {
			return fmt.Errorf("train: checkpoint %s: %w", dir, err)
		}
		for name, f := range more {
			if !ckptIsFile(name) {
				return fmt.Errorf("train: checkpoint %s: %q is not a checkpoint file name", dir, name)
			}
			man.Files[name] = f
		}
	}
	mb, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return fmt.Errorf("train: checkpoint %s: manifest: %w", dir, err)
	}
	if err := ckptWriteSynced(filepath.Join(tmp, CheckpointManifestFile), append(mb, '\n')); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	if err := ckptSyncDir(tmp); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}

	if _, err := os.Lstat(dir); err == nil {
		// dir is complete, so a leftover old is garbage.
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("train: checkpoint %s: removing the stale %s: %w", dir, old, err)
		}
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("train: checkpoint %s: moving the previous checkpoint aside: %w", dir, err)
		}
		if err := ckptSyncDir(parent); err != nil {
			return fmt.Errorf("train: checkpoint %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("train: checkpoint %s: putting the new checkpoint in place: %w", dir, err)
	}
	committed = true
	if err := ckptSyncDir(parent); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("train: checkpoint %s: saved, but removing the previous one (%s) failed: %w", dir, old, err)
	}
	return nil
}

// ckptEncode validates st and returns the bytes of each data file.
func ckptEncode(st *State) (map[string][]byte, error) {
	if st == nil {
		return nil, errors.New("state is nil")
	}
	for name, t := range st.Params {
		if _, ok := st.Buffers[name]; ok {
			return nil, fmt.Errorf("tensor %q is both a parameter and a buffer", name)
		}
		if err := ckptCheckTensor("parameter", name, t); err != nil {
			return nil, err
		}
	}
	for name, t := range st.Buffers {
		if err := ckptCheckTensor("buffer", name, t); err != nil {
			return nil, err
		}
	}
	for name, t := range st.Optimizer {
		if err := ckptCheckTensor("optimizer state", name, t); err != nil {
			return nil, err
		}
	}
	model := make(map[string]*graph.Tensor, len(st.Params)+len(st.Buffers))
	for name, t := range st.Params {
		model[name] = t
	}
	bufNames := ckptKeys(st.Buffers)
	for _, name := range bufNames {
		model[name] = st.Buffers[name]
	}
	bj, err := json.Marshal(bufNames)
	if err != nil {
		return nil, err
	}
	mb, err := tensorio.EncodeSafetensors(model, map[string]string{"format": "pt", ckptBuffersMetaKey: string(bj)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointModelFile, err)
	}
	optMeta := map[string]string{"format": "pt"}
	if st.OptimizerShards > 0 {
		optMeta[ckptZeroShardsMetaKey] = strconv.Itoa(st.OptimizerShards)
	}
	ob, err := tensorio.EncodeSafetensors(st.Optimizer, optMeta)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointOptimizerFile, err)
	}

	for _, k := range ckptKeys(st.Schedule) {
		if _, err := json.Marshal(st.Schedule[k]); err != nil {
			return nil, fmt.Errorf("schedule entry %q: %w", k, err)
		}
	}
	for _, k := range ckptKeys(st.LossScaler) {
		if v := st.LossScaler[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("loss scaler entry %q is %v; only finite values can be saved", k, v)
		}
	}
	for _, k := range ckptKeys(st.Extra) {
		if !json.Valid(st.Extra[k]) {
			return nil, fmt.Errorf("extra object %q is not valid JSON", k)
		}
	}
	sf := ckptStateFile{
		Step: st.Step, Epoch: st.Epoch, BatchInEpoch: st.BatchInEpoch, CheckpointCounter: st.CheckpointCounter,
		Schedule: st.Schedule, RNG: st.RNG, LossScaler: st.LossScaler, Extra: st.Extra, Versions: st.Versions,
	}
	sb, err := json.MarshalIndent(sf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointStateFile, err)
	}
	return map[string][]byte{
		CheckpointModelFile:     mb,
		CheckpointOptimizerFile: ob,
		CheckpointStateFile:     append(sb, '\n'),
	}, nil
}

func ckptCheckTensor(kind, name string, t *graph.Tensor) error {
	if name == "" || name == "__metadata__" {
		return fmt.Errorf("%s name %q is not allowed", kind, name)
	}
	if t == nil {
		return fmt.Errorf("%s %q is nil", kind, name)
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return nil
}

func ckptKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// onnxtrainVersion is Versions["onnxtrain"], or the module version the
// binary was built with.
func ckptOnnxtrainVersion(st *State) string {
	if v := st.Versions["onnxtrain"]; v != "" {
		return v
	}
	const module = "github.com/onnxtrain/onnxtrain"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == module && bi.Main.Version != "" {
			return bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == module {
				return d.Version
			}
		}
	}
	return "unknown"
}

// ckptIsFile reports whether name is a file a checkpoint holds.
func ckptIsFile(name string) bool {
	switch name {
	case CheckpointModelFile, CheckpointOptimizerFile, CheckpointStateFile, CheckpointManifestFile:
		return true
	}
	return isZeroShardFile(name)
}

// ckptCheckReplaceable fails unless path is missing, or is a folder that
// SaveState may delete: a checkpoint with a readable manifest, or a folder
// holding nothing but checkpoint files (a partly removed one).
func ckptCheckReplaceable(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("train: checkpoint: %s exists and is not a folder; refusing to replace it", path)
	}
	if _, err := ReadManifest(path); err == nil {
		return nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	for _, e := range entries {
		if !ckptIsFile(e.Name()) || !e.Type().IsRegular() {
			return fmt.Errorf("train: checkpoint: %s exists and is not an onnxtrain checkpoint (it holds %q); refusing to replace it", path, e.Name())
		}
	}
	return nil
}

// ckptRemoveStaleTemps removes base.tmp-* folders in parent left by crashed
// saves, when they hold nothing but checkpoint files.
func ckptRemoveStaleTemps(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), base+".tmp-") {
			p := filepath.Join(parent, e.Name())
			if ckptCheckReplaceable(p) == nil {
				os.RemoveAll(p)
			}
		}
	}
}

// ckptMakeTempDir creates a new folder prefix+random in parent (mode 0777
// before umask, unlike os.MkdirTemp's 0700).
func ckptMakeTempDir(parent, prefix string) (string, error) {
	for range 100 {
		var r [4]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		p := filepath.Join(parent, prefix+hex.EncodeToString(r[:]))
		err := os.Mkdir(p, 0o777)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("cannot create a temporary folder %s* in %s", prefix, parent)
}

// ckptWriteSynced creates path (which must not exist), writes b and fsyncs it.
func ckptWriteSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ckptSyncDir fsyncs a folder, so that the entries created or renamed in it
// are durable. Windows cannot sync a folder; there it does nothing.
func ckptSyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return f.Close()
}

// ckptResolveDir returns dir, or dir.old when dir is missing and dir.old
// exists (a save was interrupted between its two renames).
func ckptResolveDir(dir string) string {
	dir = filepath.Clean(dir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if fi, err := os.Stat(dir + ".old"); err == nil && fi.IsDir() {
			return dir + ".old"
		}
	}
	return dir
}

// ReadManifest reads and checks the manifest of the checkpoint at dir
// (falling back to dir.old as LoadState does); it does not verify the
// files' checksums.
func ReadManifest(dir string) (*Manifest, error) {
	dir = ckptResolveDir(dir)
	path := filepath.Join(dir, CheckpointManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("train: checkpoint: %w", serr)
		}
		return nil, fmt.Errorf("train: checkpoint %s: %w: it has no %s (a save was interrupted?)", dir, ErrCheckpointIncomplete, CheckpointManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s is unreadable (truncated?): %v", dir, ErrCheckpointCorrupt, CheckpointManifestFile, err)
	}
	if m.Format != CheckpointFormat {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s has format %q, want %q", dir, ErrCheckpointCorrupt, CheckpointManifestFile, m.Format, CheckpointFormat)
	}
	if m.FormatVersion < 1 || m.FormatVersion > CheckpointFormatVersion {
		return nil, fmt.Errorf("train: checkpoint %s: format version %d is not supported (this onnxtrain reads versions 1 to %d; written by onnxtrain %s)",
			dir, m.FormatVersion, CheckpointFormatVersion, m.OnnxtrainVersion)
	}
	for name, f := range m.Files {
		if name == "" || name != filepath.Base(name) || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s lists the file %q, which is not a plain file name", dir, ErrCheckpointCorrupt, CheckpointManifestFile, name)
		}
		if f.Size < 0 || len(f.SHA256) != 2*sha256.Size {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s: entry of %q is malformed (size %d, sha256 %q)", dir, ErrCheckpointCorrupt, CheckpointManifestFile, name, f.Size, f.SHA256)
		}
	}
	for _, name := range ckptRequiredFiles {
		if _, ok := m.Files[name]; !ok {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s does not list %s", dir, ErrCheckpointCorrupt, CheckpointManifestFile, name)
		}
	}
	return &m, nil
}

// ckptCheckSizes checks that every file the manifest lists exists with the
// recorded size (the cheap completeness test ListCheckpoints uses).
func ckptCheckSizes(dir string, m *Manifest) error {
	for _, name := range ckptKeys(m.Files) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("train: checkpoint %s: %w: %s is missing", dir, ErrCheckpointIncomplete, name)
		}
		if err != nil {
			return fmt.Errorf("train: checkpoint %s: %w", dir, err)
		}
		if fi.Size() != m.Files[name].Size {
			return fmt.Errorf("train: checkpoint %s: %w: %s has %d bytes, the manifest says %d", dir, ErrCheckpointCorrupt, name, fi.Size(), m.Files[name].Size)
		}
	}
	return nil
}

// ckptReadVerified reads a file of the checkpoint and checks it against its
// manifest entry.
func ckptReadVerified(dir string, m *Manifest, name string) ([]byte, error) {
	want := m.Files[name]
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s is missing", dir, ErrCheckpointIncomplete, name)
	}
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	if int64(len(b)) != want.Size {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s has %d bytes, the manifest says %d", dir, ErrCheckpointCorrupt, name, len(b), want.Size)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, want.SHA256) {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s has SHA-256 %s, the manifest says %s", dir, ErrCheckpointCorrupt, name, got, want.SHA256)
	}
	return b, nil
}

// LoadState reads the checkpoint at dir, verifying every file against the
// manifest's size and SHA-256 first. When dir is missing but dir.old
// exists (a save was interrupted between its renames), it loads dir.old.
// Every map of the result is non-nil.
func LoadState(dir string) (*State, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	dir = ckptResolveDir(dir)
	data := map[string][]byte{}
	for _, name := range ckptKeys(m.Files) {
		b, err := ckptReadVerified(dir, m, name)
		if err != nil {
			return nil, err
		}
		data[name] = b
	}
	return decodeState(dir, data)
}

// decodeState makes the State of a checkpoint's verified files (data, by
// file name); dir names the checkpoint in errors.
func decodeState(dir string, data map[string][]byte) (*State, error) {
	st := &State{
		Params: map[string]*graph.Tensor{}, Buffers: map[string]*graph.Tensor{}, Schedule: map[string]any{},
		RNG: map[string][]byte{}, LossScaler: map[string]float64{}, Extra: map[string]json.RawMessage{}, Versions: map[string]string{},
	}
	model, meta, err := tensorio.DecodeSafetensors(data[CheckpointModelFile])
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s: %v", dir, ErrCheckpointCorrupt, CheckpointModelFile, err)
	}
	var bufNames []string
	if s, ok := meta[ckptBuffersMetaKey]; ok {
		if err := json.Unmarshal([]byte(s), &bufNames); err != nil {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s: metadata %q: %v", dir, ErrCheckpointCorrupt, CheckpointModelFile, ckptBuffersMetaKey, err)
		}
	}
	for _, name := range bufNames {
		t, ok := model[name]
		if !ok {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s: buffer %q is listed but not stored", dir, ErrCheckpointCorrupt, CheckpointModelFile, name)
		}
		st.Buffers[name] = t
		delete(model, name)
	}
	st.Params = model
	var optMeta map[string]string
	if st.Optimizer, optMeta, err = tensorio.DecodeSafetensors(data[CheckpointOptimizerFile]); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s: %v", dir, ErrCheckpointCorrupt, CheckpointOptimizerFile, err)
	}
	if s, ok := optMeta[ckptZeroShardsMetaKey]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("train: checkpoint %s: %w: %s: metadata %q is %q, not a shard count", dir, ErrCheckpointCorrupt, CheckpointOptimizerFile, ckptZeroShardsMetaKey, s)
		}
		if err := mergeZeroShards(dir, st.Optimizer, data, n); err != nil {
			return nil, err
		}
		st.OptimizerShards = n
	}
	var sf ckptStateFile
	if err := json.Unmarshal(data[CheckpointStateFile], &sf); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s: %v", dir, ErrCheckpointCorrupt, CheckpointStateFile, err)
	}
	st.Step, st.Epoch, st.BatchInEpoch, st.CheckpointCounter = sf.Step, sf.Epoch, sf.BatchInEpoch, sf.CheckpointCounter
	ckptCopy(st.Schedule, sf.Schedule)
	ckptCopy(st.RNG, sf.RNG)
	ckptCopy(st.LossScaler, sf.LossScaler)
	ckptCopy(st.Extra, sf.Extra)
	ckptCopy(st.Versions, sf.Versions)
	return st, nil
}

func ckptCopy[V any](dst, src map[string]V) {
	for k, v := range src {
		dst[k] = v
	}
}

// CheckCompatible reports whether st fits a model whose trainable
// parameters and buffers are params and buffers (buffers may be nil): every
// tensor must be present on both sides with the same shape and dtype, and
// every per-parameter optimizer tensor ("<param>/<slot>") must belong to a
// parameter, its floating-point slots having the parameter's shape. The
// error (wrapping ErrCheckpointIncompatible) lists every mismatch.
func CheckCompatible(st *State, params, buffers map[string]*graph.Tensor) error {
	if st == nil {
		return fmt.Errorf("train: %w: the state is nil", ErrCheckpointIncompatible)
	}
	var problems []string
	// compare checks one kind of tensor; otherSaved and otherModel are the
	// other kind, so a tensor that changed kind is reported once.
	compare := func(kind, otherKind string, saved, model, otherSaved, otherModel map[string]*graph.Tensor) {
		for _, name := range ckptKeys(model) {
			m := model[name]
			s, ok := saved[name]
			_, isOther := otherSaved[name]
			switch {
			case !ok && isOther:
				problems = append(problems, fmt.Sprintf("%s %q is a %s in the checkpoint", kind, name, otherKind))
			case !ok:
				problems = append(problems, fmt.Sprintf("%s %q is missing from the checkpoint", kind, name))
			case s == nil || m == nil:
				problems = append(problems, fmt.Sprintf("%s %q is nil", kind, name))
			default:
				if s.DType != m.DType {
					problems = append(problems, fmt.Sprintf("%s %q: dtype %v in the checkpoint, %v in the model", kind, name, s.DType, m.DType))
				}
				if !graph.SameShape(s.Shape, m.Shape) {
					problems = append(problems, fmt.Sprintf("%s %q: shape %v in the checkpoint, %v in the model", kind, name, s.Shape, m.Shape))
				}
			}
		}
		for _, name := range ckptKeys(saved) {
			_, inModel := model[name]
			_, inOther := otherModel[name]
			if !inModel && !inOther {
				problems = append(problems, fmt.Sprintf("%s %q of the checkpoint is not in the model", kind, name))
			}
		}
	}
	compare("parameter", "buffer", st.Params, params, st.Buffers, buffers)
	compare("buffer", "parameter", st.Buffers, buffers, st.Params, params)
	for _, key := range ckptKeys(st.Optimizer) {
		i := strings.LastIndexByte(key, '/')
		if i <= 0 {
			continue // optimizer-wide entries such as "step" and "lr"
		}
		name, t := key[:i], st.Optimizer[key]
		p, ok := params[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("optimizer state %q is for parameter %q, which the model does not train", key, name))
		case t == nil || p == nil:
			problems = append(problems, fmt.Sprintf("optimizer state %q is nil", key))
		case t.DType.IsFloat() && !graph.SameShape(t.Shape, p.Shape):
			problems = append(problems, fmt.Sprintf("optimizer state %q: shape %v, but the parameter has %v", key, t.Shape, p.Shape))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("train: %w: %d problem(s):\n  %s", ErrCheckpointIncompatible, len(problems), strings.Join(problems, "\n  "))
}

// checkpointPrefix starts the names CheckpointName makes.
const checkpointPrefix = "checkpoint-"

// ErrNoCheckpoint is returned by Latest when a folder holds no complete
// checkpoint.
var ErrNoCheckpoint = errors.New("no complete checkpoint")

// CheckpointName is the folder name of the checkpoint written after
// optimizer step step: "checkpoint-1200", as Hugging Face's Trainer names
// them. Folders of earlier versions, numbered by save count with six
// digits ("checkpoint-000012"), are still found and loaded; they sort
// before the step-named ones of a run that resumed from them, since a run
// saves at most once per step.
func CheckpointName(step int) string {
	return fmt.Sprintf("%s%d", checkpointPrefix, step)
}

// ckptParseName returns the number of a checkpoint folder name (its step,
// or the save count of the old six-digit names), and whether name is one.
func ckptParseName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, checkpointPrefix)
	if !ok || len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, false
	}
	return n, true
}

// ckptEntry is one checkpoint-N folder (or its fallback) under a root.
type ckptEntry struct {
	counter int
	path    string
}

// ckptScan finds the complete checkpoints under root, sorted by
// counter, and returns the names of the other entries that belong to a
// counter (incomplete folders, .tmp-* and stale .old folders) by counter.
func ckptScan(root string) ([]ckptEntry, map[int][]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("train: checkpoints: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
	}
	complete := func(path string) bool {
		m, err := ReadManifest(path)
		return err == nil && ckptCheckSizes(path, m) == nil
	}
	var list []ckptEntry
	other := map[int][]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		stem, suffix := name, ""
		if i := strings.IndexByte(name, '.'); i >= 0 {
			stem, suffix = name[:i], name[i:]
		}
		n, ok := ckptParseName(stem)
		if !ok {
			continue
		}
		path := filepath.Join(root, name)
		switch {
		case suffix == "" && complete(path):
			list = append(list, ckptEntry{n, path})
		case suffix == ".old" && !present[stem] && complete(path):
			// A save of stem was interrupted between its renames.
			list = append(list, ckptEntry{n, path})
		case suffix == "" || suffix == ".old" || strings.HasPrefix(suffix, ".tmp-"):
			other[n] = append(other[n], name)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].counter < list[j].counter })
	return list, other, nil
}

// ListCheckpoints returns the paths of the complete checkpoints under root
// (folders named by CheckpointName whose manifest is valid and whose files
// all have the recorded sizes), sorted by counter. Checksums are verified
// by LoadState, not here. A missing root holds no checkpoints.
func ListCheckpoints(root string) ([]string, error) {
	list, _, err := ckptScan(root)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(list))
	for i, e := range list {
		paths[i] = e.path
	}
	return paths, nil
}

// Latest returns the path of the newest complete checkpoint under root
// (for --resume latest).
func Latest(root string) (string, error) {
	list, _, err := ckptScan(root)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "", fmt.Errorf("train: %w under %s", ErrNoCheckpoint, root)
	}
	return list[len(list)-1].path, nil
}

// Prune removes all but the newest keepLast complete checkpoints under
// root, and the debris of crashed saves and removals (incomplete, .tmp-*
// and .old folders) of counters older than the newest complete checkpoint.
// A checkpoint is made incomplete (its manifest removed) before the rest of
// it is, so an interrupted Prune never leaves a folder that looks complete.
func Prune(root string, keepLast int) error {
	return PruneKeeping(root, keepLast, "")
}

// PruneKeeping is Prune that also spares the checkpoint folder named keep
// (the best one of --save-best), which does not count among the keepLast.
func PruneKeeping(root string, keepLast int, keep string) error {
	if keepLast < 1 {
		return fmt.Errorf("train: prune: keepLast must be at least 1, got %d", keepLast)
	}
	list, other, err := ckptScan(root)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return nil
	}
	var errs []error
	if keep != "" {
		kept := list[:0:0]
		for _, e := range list {
			if filepath.Base(e.path) != keep && filepath.Base(e.path) != keep+".old" {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			return nil
		}
		newest := list[len(list)-1]
		list = kept
		if list[len(list)-1] != newest {
			list = append(list, newest) // the best is the newest: it bounds the debris below
		}
	}
	for _, e := range list[:max(0, len(list)-keepLast)] {
		if err := ckptRemove(e.path); err != nil {
			errs = append(errs, err)
		}
	}
	newest := list[len(list)-1].counter
	for n, names := range other {
		if n >= newest {
			continue // could be a save in progress
		}
		for _, name := range names {
			p := filepath.Join(root, name)
			if err := ckptCheckReplaceable(p); err != nil {
				continue // not ours to delete
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("train: prune: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// ckptRemove deletes a checkpoint folder, its manifest first.
func ckptRemove(path string) error {
	if err := os.Remove(filepath.Join(path, CheckpointManifestFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("train: prune: %w", err)
	}
	if err := ckptSyncDir(path); err != nil {
		return fmt.Errorf("train: prune: %w", err)
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("train: prune: %w", err)
	}
	return nil
}
