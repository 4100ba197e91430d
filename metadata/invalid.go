package metadata

import "fmt"

// OptionError is a refused value of one named option of a library call.
// Option names the option as the caller set it: the Go field (for example
// "Threshold" of scheduler.PlanOptions, "Limits.PerNode" of
// scheduler.DaemonConfig) or the parameter. Its message is the option's
// name followed by Msg, one sentence saying what is wrong with the value
// and what to do. It matches ErrInvalid, like every invalid-input error.
// A command line that took the value from a flag shows the flag's name in
// place of Option (cmd/shardmover).
type OptionError struct {
	Option string
	Msg    string
}

func (e *OptionError) Error() string        { return e.Option + " " + e.Msg }
func (e *OptionError) Is(target error) bool { return target == ErrInvalid }

// InvalidOption returns an OptionError for option with the formatted Msg,
// which continues the sentence that the option's name begins.
func InvalidOption(option, format string, args ...any) error {
	return &OptionError{Option: option, Msg: fmt.Sprintf(format, args...)}
}
