package cuda

import (
	_ "embed"
	"fmt"
)

//go:generate sh kernels/gen.sh

// kernelPTX is kernels/kernels.cu compiled ahead of time by clang
// (kernels/gen.sh): PTX ISA 7.0 for sm_80, which the driver JIT-compiles
// for the GPU it runs on (Ampere, Hopper and newer) when the module loads.
//
//go:embed kernels/kernels.ptx
var kernelPTX string

// kernelSigs declares every kernel's parameters, one letter each: p a
// device pointer, l a 64-bit integer, i a 32-bit integer, f a float32, x
// an Index by value. TestKernelSignaturesMatchPTX checks them against the
// PTX; every Launch the planner builds is checked against them.
var kernelSigs = map[string]string{
	"cast_any":             "ppli" + "i",
	"binary_fp":            "pppli" + "ix",
	"binary_i64":           "pppli" + "x",
	"compare_any":          "pppli" + "ix",
	"where_any":            "pppp" + "lix",
	"unary_fp":             "ppli" + "i",
	"strided_copy":         "pplix",
	"fill":                 "plil",
	"pad_mode":             "pplii" + "xx",
	"gather":               "ppp" + "llllii",
	"gather_elements_f32":  "ppp" + "llll",
	"scatter_elements_f32": "ppp" + "llll" + "i",
	"reduce_fp":            "pp" + "llli" + "i",
	"reduce_rows_fp":       "pp" + "lli" + "i",
	"argmax_f32":           "pp" + "llli",
	"cumsum_f32":           "pp" + "llli" + "i",
	"softmax_f32":          "pp" + "lli",
	"softmax_grad_f32":     "ppp" + "lli",
	"layernorm_f32":        "pppppp" + "llf",
	"gelu_f32":             "ppli",
	"gelu_grad_f32":        "pppl",
	"softmax_xent_f32":     "pppp" + "lll",
	"batchnorm_train_f32":  "pppppppp" + "lllffi",
	"im2col":               "pp" + "lllllll" + "llllll" + "i",
	"col2im_f32":           "pp" + "lllllll" + "llllll",
	"pool2d_f32":           "ppp" + "lllll" + "llllllll" + "i",
	"random_uniform_f32":   "plllff",
	"dropout_f32":          "ppp" + "lllf",
	"adam_update_f32":      "ppppp" + "l" + "pp" + "ii",
	"sgd_update_f32":       "ppp" + "l" + "pp" + "ii",
	"accumulate_f32":       "pplp",
	"unscale_f32":          "plpp",
	"clip_norm_total_f32":  "plppp",
	"scale_by_f32":         "plp",
	"clip_value_f32":       "plp",
}

// checkLaunch verifies a launch against its kernel's declared signature.
func checkLaunch(l *Launch) error {
	sig, ok := kernelSigs[l.Kernel]
	if !ok {
		return fmt.Errorf("cuda: no kernel %q", l.Kernel)
	}
	if len(sig) != len(l.Args) {
		return fmt.Errorf("cuda: kernel %s takes %d arguments, launch has %d", l.Kernel, len(sig), len(l.Args))
	}
	for i, a := range l.Args {
		want := map[byte]ArgKind{'p': ArgPtr, 'l': ArgI64, 'i': ArgI32, 'f': ArgF32, 'x': ArgIndex}[sig[i]]
		if a.Kind != want {
			return fmt.Errorf("cuda: kernel %s argument %d: kind %d, want %c", l.Kernel, i, a.Kind, sig[i])
		}
	}
	if l.Block[0]*l.Block[1]*l.Block[2] > 1024 || l.Block[0] == 0 || l.Grid[0] == 0 {
		return fmt.Errorf("cuda: kernel %s: launch geometry grid %v block %v out of range", l.Kernel, l.Grid, l.Block)
	}
	return nil
}
