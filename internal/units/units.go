package units

import (
	"math"
	"strconv"
)

// Bytes prints a byte count with binary units and one decimal, e.g.
// "1.5 GiB"; below 1 KiB in bytes ("512 B"). Negative counts (deltas) keep
// their sign.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v := float64(n)
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := -1
	for math.Abs(v) >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
