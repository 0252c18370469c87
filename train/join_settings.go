package train

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// The settings every rank of a data-parallel job must agree on, compared
// by distrib when the group forms (see joinGroup): what the ranks train
// (the model file's SHA-256, the data's SHA-256 or size), every field of
// Config that changes the arithmetic or the schedule (batch size,
// accumulation, optimizer and its hyper-parameters, loss, schedule, mixed
// precision, ZeRO stage, seed, preprocessing, ...), the pipeline layout and
// the onnxtrain version. Each is named as the user sets it ("--lr").
//
// Config fields are included unless listed in perRankFields, so a flag
// added later is compared without further work; a field that may
// legitimately differ between ranks (a path, a logging choice) belongs in
// that list.

// perRankFields are the Config fields (by YAML name) that may differ
// between ranks, or that are compared another way.
var perRankFields = map[string]bool{
	"model":            true, // compared by content (SHA-256)
	"data":             true, // compared by content or size
	"val-data":         true, // compared by content or size
	"output":           true,
	"log-format":       true,
	"log-dir":          true,
	"metrics-addr":     true,
	"keep-last":        true,
	"resume":           true, // a path; where it lives may differ per node
	"debug":            true, // distrib compares it itself
	"dist-timeout":     true,
	"comm":             true,
	"dist-secret-file": true,
	"force-unlock":     true, // the main process's business
}

// joinSettings lists what tc's rank must agree on with the others.
func joinSettings(tc Config) ([]distrib.Setting, error) {
	sum, err := fileSHA256(tc.Model)
	if err != nil {
		return nil, fmt.Errorf("train: --model: %w", err)
	}
	out := []distrib.Setting{
		{Name: "--model (SHA-256)", Value: sum},
		{Name: "--data", Value: dataIdentity(tc.Data)},
	}
	if tc.ValData != "" {
		out = append(out, distrib.Setting{Name: "--val-data", Value: dataIdentity(tc.ValData)})
	}
	v := reflect.ValueOf(tc)
	ty := v.Type()
	for i := 0; i < ty.NumField(); i++ {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || perRankFields[name] || !ty.Field(i).IsExported() {
			continue
		}
		out = append(out, distrib.Setting{Name: "--" + name, Value: settingText(v.Field(i))})
	}
	// The pipeline layout is in the fields above (--pipeline-stages,
	// --micro-batches, --schedule, --virtual-stages, --split-at,
	// --partition, --stage-memory): they are compared like the others.
	// Of the compile options (Tuning, set from the environment, not a
	// flag), the Winograd policy changes the convolutions' rounding, so
	// ranks that differ in it would drift apart; the memory plan does not
	// change a value.
	out = append(out, distrib.Setting{Name: "ONNXTRAIN_WINOGRAD", Value: tc.Tuning.Winograd.String()})
	out = append(out, distrib.Setting{Name: "onnxtrain version", Value: onnxtrainBuild()})
	return out, nil
}

func settingText(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = settingText(v.Index(i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case reflect.Pointer:
		if v.IsNil() {
			return "nil"
		}
		return settingText(v.Elem())
	}
	return fmt.Sprint(v.Interface())
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashDataUpTo is the largest data file whose bytes are hashed at join;
// larger files are named by their name and size.
const hashDataUpTo = 256 << 20

// dataIdentity says what a data source holds: a file up to hashDataUpTo
// by its SHA-256, a larger one by its base name and size, a folder by its
// base name and the number and total size of its files. (Hashing every
// dataset would read all of it at start; the size catches a different file
// or a different subset.)
func dataIdentity(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return filepath.Base(path) + " (unreadable)"
	}
	if !st.IsDir() {
		if st.Size() <= hashDataUpTo {
			if sum, err := fileSHA256(path); err == nil {
				return "SHA-256 " + sum
			}
		}
		return fmt.Sprintf("%s (%d bytes)", filepath.Base(path), st.Size())
	}
	var files, bytes int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			files++
			bytes += info.Size()
		}
		return nil
	})
	return fmt.Sprintf("%s/ (%d files, %d bytes)", filepath.Base(filepath.Clean(path)), files, bytes)
}

// onnxtrainBuild names the build: the module version and, when the build
// recorded it, the commit (with "+dirty" for uncommitted changes).
func onnxtrainBuild() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v
}

// prepareJoin completes the group's config from tc: the secret from
// --dist-secret-file (over the environment's), the settings to compare,
// and the logger that reports refused connections (the command's).
func prepareJoin(cfg *distrib.Config, tc Config) error {
	if tc.DistSecretFile != "" {
		secret, err := distrib.ReadSecretFile(tc.DistSecretFile)
		if err != nil {
			return fmt.Errorf("train: --dist-secret-file: %w", err)
		}
		cfg.Secret = secret
	}
	settings, err := joinSettings(tc)
	if err != nil {
		return err
	}
	cfg.Settings = settings
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	return nil
}
