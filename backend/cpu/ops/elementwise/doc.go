// Package elementwise holds the CPU kernels of the elementwise op family;
// they register themselves with kern from init.
//
// Binary ops broadcast numpy-style through a bcastPlan, which collapses the
// output shape so every operand is walked in rows with an innermost stride
// of 0 or 1; each op supplies three row loops (both operands contiguous,
// scalar right, scalar left) written generically over the element types, so
// Go compiles one tight typed loop per dtype. Large outputs are split across
// goroutines. Float-only unary ops compute in float64 and round once.
//
// Ops: Abs Acos Acosh Add And Asin Asinh Atan Atanh BitShift BitwiseAnd
// BitwiseNot BitwiseOr BitwiseXor Cast CastLike Ceil Celu Clip Cos Cosh Div
// Elu Equal Erf Exp Floor Gelu Greater GreaterOrEqual HardSigmoid HardSwish
// IsInf IsNaN LeakyRelu Less LessOrEqual Log Max Mean Min Mish Mod Mul Neg
// Not Or PRelu Pow Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh
// Softplus Softsign Sqrt Sub Sum Tan Tanh ThresholdedRelu Where Xor.
//
// Cast handles every pair of numeric dtypes, bool, float16, bfloat16 and
// string; float8 and other types are refused with graph.ErrUnsupportedOp.
package elementwise
