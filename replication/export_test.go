package replication

// SetQuietWaits turns the coalescing reader's raised low-water mark on or
// off, for a comparison, and returns the previous setting.
func SetQuietWaits(on bool) bool { return !plainWaits.Swap(!on) }
