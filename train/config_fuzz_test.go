package train

import (
	"testing"
)

// FuzzConfigYAML: whatever a train.yaml holds, reading it over the
// defaults and validating the result errs or succeeds without panicking
// (dashKeys rewrites the keys through yaml.v3's node tree before the
// strict decode).
func FuzzConfigYAML(f *testing.F) {
	f.Add([]byte("batch_size: 7\ngrad_accum: 3\nloss: cross_entropy\nmixed-precision: bf16\n"))
	f.Add([]byte("model: m.onnx\ndata: d.npz\nepochs: 2\nlr: 1e-3\nclip_grad_norm: 1\n"))
	f.Add([]byte("batch_size: 7\nbatch-size: 8\n"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte("? [a, b]\n: c\n"))
	f.Add([]byte("dist-timeout: 30s\nzero: 2\ncomm: mpi\ncompress-bf16: true\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := DefaultConfig()
		if decodeYAML("c.yaml", b, &cfg) != nil {
			return
		}
		_ = cfg.Validate()
	})
}
