// Package ops links every CPU kernel family into the binary. Each family is a
// package that registers its kernels with kern in init.
package ops
