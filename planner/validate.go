package planner

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidInput is wrapped by every error Plan returns: the input itself
// is wrong (the CLI maps it to exit code 2). Plan returns no other errors.
var ErrInvalidInput = errors.New("invalid planner input")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

func finiteNonNeg(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// validateOptions checks the scalar options of in.
func validateOptions(in *Input) error {
	if in.Strategy != ByShardCount && in.Strategy != ByDiskSize && in.Strategy != ByLoad {
		return invalid("unknown strategy %d; use one of %s", int(in.Strategy), StrategyNames)
	}
	if !finiteNonNeg(in.Threshold) {
		return invalid("threshold %v is not a finite number of 0 or more; use e.g. 0.1", in.Threshold)
	}
	if !finiteNonNeg(in.ImprovementThreshold) {
		return invalid("improvement threshold %v is not a finite number of 0 or more; use 0 to turn it off", in.ImprovementThreshold)
	}
	if in.MaxMoves < -1 {
		return invalid("max moves %d is below -1; use -1 for no limit or a count of 0 or more", in.MaxMoves)
	}
	if in.MaxPerNode < 0 {
		return invalid("max moves per node %d is negative; use 1 or more (0 means 1)", in.MaxPerNode)
	}
	if !finiteNonNeg(in.LoadBase) {
		return invalid("load base %v is not a finite number of 0 or more; use 0 for the automatic base", in.LoadBase)
	}
	if in.BaseCost < 0 {
		return invalid("base cost %d is negative; use 0 or more bytes", in.BaseCost)
	}
	return nil
}
