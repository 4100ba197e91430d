// BenchmarkDecodeInsert*: one github_events-shaped Insert message decoded by
// pglogrepl and by decodeChange (on a busy 2-core host: about 2.3us and
// 16 allocations against 0.83us and 5).

package replication

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func benchInsertMsg() []byte {
	return changeBytes('I', 0, false, []byte{'N'}, tupleBytes("ttttt", "12345", "678", "PushEvent",
		`{"ref": "refs/heads/main", "rev": 12345, "repo": "827ccb0eea8a706c4c34a16891f84e7b", "size": 4}`, "2024-01-01 03:25:45+00"))
}

func BenchmarkDecodeInsertPglogrepl(b *testing.B) {
	data := benchInsertMsg()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m, err := pglogrepl.ParseV2(data, false)
		if err != nil {
			b.Fatal(err)
		}
		_ = m
	}
}

func BenchmarkDecodeInsertOwn(b *testing.B) {
	data := benchInsertMsg()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m, _, err := decodeChange(data, false)
		if err != nil {
			b.Fatal(err)
		}
		_ = m
	}
}
