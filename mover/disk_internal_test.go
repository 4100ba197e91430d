package mover

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDF(t *testing.T) {
	free, err := parseDF([]string{
		"Filesystem     1024-blocks     Used Available Capacity Mounted on",
		"/dev/vda        102687672 51234567  46198765      53% /",
	})
	require.NoError(t, err)
	assert.EqualValues(t, 46198765*1024, free)
	// A long device name wraps onto its own line without -P; with -P it
	// never does, but the last line is what counts either way.
	_, err = parseDF([]string{"Filesystem 1024-blocks Used Available Capacity Mounted on"})
	assert.Error(t, err)
	_, err = parseDF([]string{"h", "/dev/x 1 2 lots 5% /"})
	assert.Error(t, err)
}
