package data

import (
	"math/bits"
	"math/rand/v2"
)

// The generators here are math/rand/v2's PCG, whose output for a given
// seed is fixed by its documentation (PCG-DXSM), with our own bounded
// draws and shuffle, so orders never change with the Go version.

// mix64 is SplitMix64's finaliser, used to derive independent seeds.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// newRNG returns a generator for (seed, stream, a, b): different streams
// (shuffle, augmentation) and coordinates draw independent sequences.
func newRNG(seed uint64, stream uint64, a, b int) *rand.PCG {
	return rand.NewPCG(mix64(seed^mix64(stream)), mix64(uint64(a)<<32^uint64(uint32(b))^mix64(stream+1)))
}

const (
	streamShuffle = 1
	streamAugment = 2
)

// intN returns a uniform draw from [0, n) (Lemire's method, unbiased).
func intN(r *rand.PCG, n int) int {
	un := uint64(n)
	hi, lo := bits.Mul64(r.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), un)
		}
	}
	return int(hi)
}

// permutation returns a Fisher-Yates shuffle of 0..n-1.
func permutation(r *rand.PCG, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := intN(r, i+1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}
