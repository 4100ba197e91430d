package sandbox

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMoverRoleSQLIsDocumented: docs/privileges.md reproduces the script
// word for word, so the document and what the tests run are one.
func TestMoverRoleSQLIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/privileges.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(doc), "```sql\n"+MoverRoleSQL+"```\n"),
		"docs/privileges.md must hold internal/sandbox/moverrole.sql verbatim in a sql block; copy it there again")
}

func TestSubstitute(t *testing.T) {
	got, err := substitute(`ALTER ROLE :"role" PASSWORD :'password'; GRANT :"owner" TO :"role";`,
		map[string]string{"role": `a"b`, "password": `it's`, "owner": "o"})
	require.NoError(t, err)
	assert.Equal(t, `ALTER ROLE "a""b" PASSWORD 'it''s'; GRANT "o" TO "a""b";`, got)
	_, err = substitute(`SELECT :'nope'`, map[string]string{})
	assert.ErrorContains(t, err, `"nope"`)
	// An error names the statement, never a value.
	assert.Equal(t, "ALTER ROLE x PASSWORD ...", firstLine("ALTER ROLE x PASSWORD 'secret';"))
}
