package metadata

import (
	"math"
	"math/bits"
)

// PostgreSQL's hash functions (src/common/hashfn.c, Bob Jenkins' lookup3 as
// PostgreSQL uses it on little- and big-endian machines alike for the
// byte-at-a-time path). Results are the int4 values the server returns.

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// HashBytes is PostgreSQL's hash_bytes (hash_any) on a little-endian machine.
func HashBytes(k []byte) int32 {
	n := uint32(len(k))
	a := 0x9e3779b9 + n + 3923095
	b, c := a, a
	for len(k) >= 12 {
		a += uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16 | uint32(k[3])<<24
		b += uint32(k[4]) | uint32(k[5])<<8 | uint32(k[6])<<16 | uint32(k[7])<<24
		c += uint32(k[8]) | uint32(k[9])<<8 | uint32(k[10])<<16 | uint32(k[11])<<24
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The last 11 bytes; the lowest byte of c is reserved (PostgreSQL keeps
	// lookup3's layout without adding the length there).
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += uint32(k[7]) << 24
		fallthrough
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += uint32(k[3]) << 24
		fallthrough
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	return int32(final(a, b, c))
}

// hashUint32 is PostgreSQL's hash_bytes_uint32.
func hashUint32(k uint32) int32 {
	a := uint32(0x9e3779b9) + 4 + 3923095
	b, c := a, a
	a += k
	return int32(final(a, b, c))
}

// HashInt2 is PostgreSQL's hashint2.
func HashInt2(v int16) int32 { return hashUint32(uint32(int32(v))) }

// HashInt4 is PostgreSQL's hashint4.
func HashInt4(v int32) int32 { return hashUint32(uint32(v)) }

// HashInt8 is PostgreSQL's hashint8: it folds the high half into the low half
// so that values fitting in int4 hash as hashint4 does.
func HashInt8(v int64) int32 {
	lo := uint32(v)
	hi := uint32(uint64(v) >> 32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return hashUint32(lo)
}

// HashText is PostgreSQL's hashtext under a deterministic collation (the
// bytes of the UTF-8 string).
func HashText(s string) int32 { return HashBytes([]byte(s)) }

// Range is one shard's inclusive hash range.
type Range struct {
	Min, Max int32
}

// Contains reports whether h lies in the range.
func (r Range) Contains(h int32) bool { return h >= r.Min && h <= r.Max }

// HashRanges splits the int32 space into n ranges exactly as Citus does:
// inc = 2^32 / n, shard i covers [MinInt32 + i*inc, MinInt32 + (i+1)*inc - 1],
// and the last ends at MaxInt32.
func HashRanges(n int) ([]Range, error) {
	if n < 1 || n > 64000*2 {
		return nil, invalidf("shard count must be between 1 and 128000, got %d", n)
	}
	inc := uint64(1<<32) / uint64(n)
	out := make([]Range, n)
	for i := 0; i < n; i++ {
		lo := int64(math.MinInt32) + int64(i)*int64(inc)
		hi := lo + int64(inc) - 1
		if i == n-1 {
			hi = math.MaxInt32
		}
		out[i] = Range{Min: int32(lo), Max: int32(hi)}
	}
	return out, nil
}
