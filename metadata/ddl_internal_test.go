package metadata

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

// TestSuffixedNamesAreValidAndUnique: a suffixed name never exceeds 63
// bytes, never splits a UTF-8 character, keeps its whole suffix, and stays
// unique: two shards of one index (102008, 102009: a plain cut made both
// "<name>_1") and two long names that share a prefix get different names.
func TestSuffixedNamesAreValidAndUnique(t *testing.T) {
	assert.Equal(t, "ix_102008", suffixed("ix", "102008"))
	assert.Equal(t, "ix", suffixed("ix", ""))
	seen := map[string]string{}
	for _, name := range []string{
		strings.Repeat("ü", 30) + "a",
		strings.Repeat("ü", 30) + "b",
		strings.Repeat("x", 63),
		strings.Repeat("x", 62) + "y",
		strings.Repeat("x", 55) + "€€",
		"a" + strings.Repeat("€", 20),
	} {
		for _, suffix := range []string{"1", "102008", "102009", "9223372036854775807"} {
			s := suffixed(name, suffix)
			assert.LessOrEqual(t, len(s), 63, s)
			assert.True(t, utf8.ValidString(s), "%q", s)
			assert.True(t, strings.HasSuffix(s, "_"+suffix), s)
			if prev, ok := seen[s]; ok {
				t.Errorf("%q and %q both become %q", prev, name, s)
			}
			seen[s] = name
		}
	}
}

func TestQuoteLiteral(t *testing.T) {
	assert.Equal(t, `'a''b'`, quoteLiteral(`a'b`))
	assert.Equal(t, `E'a\\''b'`, quoteLiteral(`a\'b`))
}
