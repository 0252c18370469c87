package train

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/train/optim"
)

// LRGroup is one --lr-group REGEX=LR.
type LRGroup struct {
	Pattern *regexp.Regexp
	LR      float64
}

// ParseLRGroup reads a --lr-group value: REGEX=LR (split at the last '=').
func ParseLRGroup(s string) (LRGroup, error) {
	i := strings.LastIndex(s, "=")
	if i <= 0 {
		return LRGroup{}, fmt.Errorf("--lr-group %q: want REGEX=LR, e.g. '^fc\\.=0.01'", s)
	}
	re, err := regexp.Compile(s[:i])
	if err != nil {
		return LRGroup{}, fmt.Errorf("--lr-group %q: %w", s, err)
	}
	lr, err := strconv.ParseFloat(strings.TrimSpace(s[i+1:]), 64)
	if err != nil || math.IsNaN(lr) || math.IsInf(lr, 0) || lr <= 0 {
		return LRGroup{}, fmt.Errorf("--lr-group %q: the learning rate must be a positive number (use --freeze to stop parameters training)", s)
	}
	return LRGroup{Pattern: re, LR: lr}, nil
}

// lrGroups adds the --lr-group groups to base (the decay and no-decay
// groups) and moves each parameter whose name matches a pattern (the first
// that matches) into that pattern's pair of groups. A group's learning rate
// is a fixed multiple of --lr (LR/--lr), so schedules and warmup scale it
// as they scale --lr.
func lrGroups(cfg Config, params []*optim.Param, base []optim.Group) ([]optim.Group, error) {
	if len(cfg.LRGroups) == 0 {
		return base, nil
	}
	if cfg.LR <= 0 {
		return nil, fmt.Errorf("--lr-group needs a positive --lr (group rates are multiples of it), got %g", cfg.LR)
	}
	groups := append([]optim.Group(nil), base...)
	var lgs []LRGroup
	for _, s := range cfg.LRGroups {
		lg, err := ParseLRGroup(s)
		if err != nil {
			return nil, err
		}
		lgs = append(lgs, lg)
		scale := lg.LR / cfg.LR
		groups = append(groups, optim.Group{LRScale: scale, WeightDecay: base[0].WeightDecay}, optim.Group{LRScale: scale, WeightDecay: base[1].WeightDecay})
	}
	matched := make([]int, len(lgs))
	for _, p := range params {
		for i, lg := range lgs {
			if lg.Pattern.MatchString(p.Name) {
				p.Group = len(base) + 2*i + p.Group%2
				matched[i]++
				break
			}
		}
	}
	for i, n := range matched {
		if n == 0 {
			return nil, fmt.Errorf("--lr-group %q matches no trainable parameter", cfg.LRGroups[i])
		}
	}
	return groups, nil
}
