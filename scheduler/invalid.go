package scheduler

import "github.com/shardmover/shardmover/metadata"

// optionf refuses the value of one option, named as the caller set it (a
// field of PlanOptions or DaemonConfig, or a parameter); see
// metadata.OptionError.
func optionf(option, format string, args ...any) error {
	return metadata.InvalidOption(option, format, args...)
}
