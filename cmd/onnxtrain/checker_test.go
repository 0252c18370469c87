package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// checkModelScript runs ONNX's own checker with full_check (strict shape
// inference included) on the file it is given and prints "ok".
const checkModelScript = `
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
print("ok", m.ir_version, [(o.domain, o.version) for o in m.opset_import])
`

// TestTrainOutputPassesONNXChecker: the model.onnx that `onnxtrain train
// --output` writes passes onnx.checker.check_model(full_check=True), for an
// MLP, a ResNet with BatchNorm and a ViT.
func TestTrainOutputPassesONNXChecker(t *testing.T) {
	checkerPython := testutil.Python(t, "onnx.checker")
	for _, name := range []string{"mlp", "cifar_resnet", "vit_tiny"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			runCLI(t, "train", "--model", "../../models/"+name+"/"+name+"_train.onnx", "--data", "../../models/"+name+"/train_case.npz",
				"--batch-size", "2", "--steps", "2", "--log-format", "json", "--output", out)
			path := filepath.Join(out, "model.onnx")
			require.FileExists(t, path)
			res, err := exec.Command(checkerPython, "-c", checkModelScript, path).CombinedOutput()
			require.NoError(t, err, "onnx.checker rejects %s:\n%s", path, res)
			assert.Regexp(t, `^ok `, string(res))
			t.Logf("%s: %s", name, res)

			// The check can fail: the same model with a node reading a
			// value nothing defines is rejected.
			m, err := importer.Load(path)
			require.NoError(t, err)
			m.Graph.Nodes[len(m.Graph.Nodes)-1].Inputs[0] = "undefined_value"
			broken := filepath.Join(t.TempDir(), "broken.onnx")
			require.NoError(t, importer.Save(broken, m))
			res, err = exec.Command(checkerPython, "-c", checkModelScript, broken).CombinedOutput()
			assert.Error(t, err, "onnx.checker accepted a model with an undefined input: %s", res)
		})
	}
}
