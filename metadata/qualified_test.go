package metadata

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQualifiedNameRoundTrips(t *testing.T) {
	for _, id := range []pgx.Identifier{
		{"public", "github_events_102027"},
		{"a.b", "c.d_1"},
		{`we"ird`, `"`},
		{"sp ace", "ünï cödé"},
		{"x", `t USING btree (id); DROP TABLE victim; --`},
	} {
		got, err := ParseQualifiedName(QualifiedName(id))
		require.NoError(t, err, "%v", id)
		assert.Equal(t, id, got)
	}
	old, err := ParseQualifiedName("public.events_102008")
	require.NoError(t, err)
	assert.Equal(t, pgx.Identifier{"public", "events_102008"}, old, "the journal's older unquoted form")
	assert.Equal(t, "public.github_users_102008_moved_1", DisplayQualifiedName(QualifiedName(pgx.Identifier{"public", "github_users_102008_moved_1"})))
	assert.Equal(t, `"a.b"."T 1"`, DisplayQualifiedName(QualifiedName(pgx.Identifier{"a.b", "T 1"})))
	for _, bad := range []string{`"a`, `"a"`, `"a"x"b"`, `"a"."b"."c"`, "nodot"} {
		_, err := ParseQualifiedName(bad)
		assert.Error(t, err, bad)
	}
}
